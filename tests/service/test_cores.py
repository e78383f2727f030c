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
