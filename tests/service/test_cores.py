"""The cores `ssi serve` sizes itself by (service.cores): the cgroup's CPU quota over the host's count."""

from __future__ import annotations

from pathlib import Path

import pytest

from service import cores
from service.cores import cgroup_quota


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_v2_quota_is_the_tightest_of_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _write(root / "cpu.max", "max 100000\n")
    _write(root / "kubepods" / "cpu.max", "250000 100000\n")
    _write(root / "kubepods" / "pod1" / "cpu.max", "max 100000\n")
    _write(tmp_path / "self", "0::/kubepods/pod1\n")
    assert cgroup_quota(root, tmp_path / "self") == pytest.approx(2.5)
    _write(root / "kubepods" / "pod1" / "cpu.max", "50000 100000\n")
    assert cgroup_quota(root, tmp_path / "self") == pytest.approx(0.5)


def test_a_v1_quota_and_no_quota(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "150000\n")
    _write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    _write(tmp_path / "self", "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n")
    assert cgroup_quota(root, tmp_path / "self") == pytest.approx(1.5)
    _write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "-1\n")  # unlimited
    assert cgroup_quota(root, tmp_path / "self") is None
    assert cgroup_quota(root, tmp_path / "missing") is None


def test_a_quota_rounds_up_and_bounds_the_default_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.settings import default_threads

    monkeypatch.setattr(cores.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.setattr(cores, "cgroup_quota", lambda: 0.5)
    found = cores.usable_cores()
    assert (found.usable, found.bound_by) == (1, "cgroup quota")
    assert found.describe() == "1 of the host's 16 cores (cgroup quota)"
    assert default_threads() == 1
    monkeypatch.setattr(cores, "cgroup_quota", lambda: 1.2)
    assert cores.usable_cores().usable == 2 and default_threads() == 2
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: {3})
    assert cores.usable_cores() == cores.Cores(usable=1, host=16, bound_by="affinity")


@pytest.mark.parametrize(
    ("usable", "workers", "threads", "expected"),
    [
        (1, None, None, (1, 1)),
        (2, None, None, (2, 1)),  # the 2-core machine: a worker per core, never more busy threads than cores
        (16, None, None, (16, 1)),  # no fixed cap: a worker per core on a 16-core host
        (64, None, None, (64, 1)),
        (5000, None, None, (cores.MAX_WORKERS, 2)),  # only Settings.workers' bound; threads fill the rest
        (16, None, 2, (8, 2)),  # threads asked for: workers fill the rest
        (2, 1, None, (1, 2)),  # one worker asked for: it keeps two threads
        (4, None, 2, (2, 2)),  # threads asked for: workers fill the rest
        (2, 3, 3, (3, 3)),  # both given: as given (the start-up line warns of oversubscription)
    ],
)
def test_serve_sizes_fill_the_cores_unless_told(
    usable: int, workers: int | None, threads: int | None, expected: tuple[int, int]
) -> None:
    assert cores.serve_sizes(usable, workers, threads) == expected


def test_settings_sized_for_the_machine_keep_what_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.settings import Settings

    monkeypatch.setattr("service.settings.usable_cores", lambda: cores.Cores(usable=4, host=4, bound_by="host"))
    for name in ("SSI_WORKERS", "SSI_THREADS"):
        monkeypatch.delenv(name, raising=False)
    plain = Settings(bundle=Path("b"))
    assert plain.workers == 1  # a process that serves in process (tests, benchmarks) stays alone
    sized = plain.sized_for_this_machine()
    assert (sized.workers, sized.threads) == (4, 1)
    monkeypatch.setenv("SSI_WORKERS", "1")
    sized = Settings(bundle=Path("b")).sized_for_this_machine()
    assert (sized.workers, sized.threads) == (1, 2)
    monkeypatch.delenv("SSI_WORKERS")
    monkeypatch.setenv("SSI_THREADS", "2")
    sized = Settings(bundle=Path("b")).sized_for_this_machine()
    assert (sized.workers, sized.threads) == (2, 2)
