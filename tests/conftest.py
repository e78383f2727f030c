"""What every test shares: a clean SSI_* environment, one numba cache, how the suite is split across pytest-xdist
workers and which of them comes first, and the time budget of one test (docs/contributing.md says why)."""

from __future__ import annotations

import inspect
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The service's numba kernels cached on disk for every process of the run (service.jit_cache): a server process
# started by a test then loads them instead of compiling them (7.6 s to ready against 1.6 s, 400 documents).
# Set before any test module imports the service; a developer's own NUMBA_CACHE_DIR is kept.
os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".numba-cache"))
# Idle OpenMP workers (numba's parallel loops in every trainer the tests start, FAISS) sleep instead of spinning, as
# the service already sets for itself (service.threads): on a saturated 2-core machine a spinning worker only takes
# CPU from the other processes of the run. A `python -m training train` of tests/training/test_learn_round.py,
# loaded machine: 8.3-10.2 s CPU spinning, 6.9-7.4 s sleeping. A developer's own setting is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Fill that cache once, before pytest-xdist starts its workers (in its own sessionstart, which runs last),
    instead of in every worker at once: ranx's and the service's kernels (tests/numba_warmup.py); and pytest's
    rewritten test modules (tests/assert_cache.py) beside it, in a thread while the warm-up's subprocesses run."""
    if session.config.pluginmanager.has_plugin("dsession"):  # the controller of a run spread over workers
        from concurrent.futures import ThreadPoolExecutor

        from tests import assert_cache
        from tests.numba_warmup import run_parts

        with ThreadPoolExecutor(max_workers=1) as pool:
            rewritten = None
            if session.config.getoption("assertmode") == "rewrite":
                rewritten = pool.submit(assert_cache.fill, session.config, Path(__file__).parent)
            line = run_parts()
            if rewritten is not None:
                line += f"; test modules rewritten for the workers: {rewritten.result()}"
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(line)


# A test's call phase may take this long; one that takes longer says why in its docstring, in a sentence that
# starts with SLOW_REASON. Fixtures are not counted here: `--durations` lists their setup on its own lines.
BUDGET_SECONDS = 20.0
UNIT_SHOWN_SECONDS = 60.0  # every unit of work (a module, or the Ray group) that took longer is listed at the end
SLOW_REASON = "Slow:"

# The modules on a local Ray cluster run one after another on one worker, on one cluster that worker starts once
# (tests/cluster/conftest.py's shared_ray): the fault tests' timeouts are set for one cluster at a time, and two
# clusters at once would compete for the same two cores.
RAY_GROUP = "ray-cluster"
RAY_MODULES = frozenset(
    {
        "tests/cluster/test_cluster_faults.py",
        "tests/cluster/test_cluster_match.py",
        "tests/cluster/test_cluster_ray.py",
        "tests/cluster/test_replication_ray.py",
        "tests/cluster/test_ray_train.py",
    }
)


# The variables that steer the tests themselves (CI's SSI_REQUIRE_BROWSER=1 and the like) rather than the code.
HARNESS_VARIABLES = ("SSI_REQUIRE_", "SSI_SHARED_DATA")


@pytest.fixture(autouse=True, scope="session")
def _clean_ssi_environment() -> Iterator[None]:
    """Settings read SSI_* variables (the trainer's SSI_TRAIN_* too): a developer's shell must not leak into the
    tests. The harness's own variables stay: CI sets them to turn a missing browser or wrk into a failure."""
    saved = {
        k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SSI_") and not k.startswith(HARNESS_VARIABLES)
    }
    yield
    os.environ.update(saved)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _scope(nodeid: str) -> str:
    """A module is one unit of work, so its module-scoped fixtures (bundles, servers, clusters) are built once, on
    one worker; the Ray modules share one unit (RAY_GROUP)."""
    module = _module(nodeid)
    return RAY_GROUP if module in RAY_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's own `loadscope`, with _scope for its units (its `loadgroup` marks do not reach the node ids under
    pytest 9.2, which keeps them in `Node._id`)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long units first, so that no worker starts one near the end: the Ray group, then every module that has a
    test whose docstring says why it is slow, then the rest, each in collection order (xdist hands units out in
    this order: scripts/test.sh passes --no-loadscope-reorder)."""
    slow = {_module(item.nodeid) for item in items if _slow_reason(item)}
    rank = {RAY_GROUP: 0} | dict.fromkeys(slow, 1)
    items.sort(key=lambda item: rank.get(_scope(item.nodeid), 2))


# The Ray group is the longest unit and its clusters have start-up timeouts (Serve's proxies, the fault tests'
# restarts): every other worker lowers its priority by this much once it starts its first other module, so that
# on two cores the cluster's processes are served first and the rest fills the gaps. Priority only orders who
# waits: the work done, and what each test checks, are the same.
OTHERS_NICENESS = 10
_niced = False


@pytest.fixture(autouse=True, scope="module")
def _ray_group_first(request: pytest.FixtureRequest) -> None:
    """Outside the Ray group: the group's shared cluster (tests/cluster/conftest.py) is shut down, if this worker ran
    it, so that its processes do not take the cores from the rest of the run; and this worker's priority lowered."""
    global _niced
    if _scope(request.node.nodeid) == RAY_GROUP:
        return
    cluster_fixtures = sys.modules.get("tests.cluster.conftest")
    if cluster_fixtures is not None:
        before = _cpu_seconds()
        cluster_fixtures.release_shared_ray()  # its processes' CPU is counted when they are waited for: here
        _ray_cpu_after_the_group.append(_cpu_seconds() - before)
    worker = hasattr(request.config, "workerinput")  # only under pytest-xdist: a lone run keeps its priority
    if worker and not _niced:
        os.nice(OTHERS_NICENESS)  # inherited by the servers and trainers this worker starts from now on
        _niced = True


def _slow_reason(item: pytest.Item) -> str:
    """The sentence of the test's docstring that starts with SLOW_REASON, or ""."""
    doc = inspect.getdoc(getattr(item, "function", None)) or ""
    start = doc.find(SLOW_REASON)
    return " ".join(doc[start:].split(".")[0].split()) if start >= 0 else ""


def pytest_runtest_setup(item: pytest.Item) -> None:
    # user_properties travel from an xdist worker to the controller with the report, where the budget is summed.
    item.user_properties.append(("slow_reason", _slow_reason(item)))


def _cpu_seconds() -> float:
    """CPU time of this process (all its threads: in-process servers too) and of the children it has waited for
    (server processes, trainers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_cpu_mark: list[float] = []
_ray_cpu_after_the_group: list[float] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Each phase's report carries the CPU seconds spent since the last one (cpu_seconds): on two cores the suite is
    work-bound, so a unit's CPU, not its wall time (which waits on the others), says what it costs the run."""
    outcome = yield
    now = _cpu_seconds()
    spent = now - (_cpu_mark[0] if _cpu_mark else now)
    _cpu_mark[:] = [now]
    report = outcome.get_result()
    if _ray_cpu_after_the_group:  # the shared cluster's, counted in the next module's set-up: the Ray group's
        ray = sum(_ray_cpu_after_the_group)
        _ray_cpu_after_the_group.clear()
        report.user_properties.append(("ray_group_cpu_seconds", round(ray, 3)))
        spent -= ray
    report.user_properties.append(("cpu_seconds", round(spent, 3)))


class Budget:
    """Collects each test's call time and prints, at the end of every run, the wall time and who broke the budget."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.calls: dict[str, tuple[float, str]] = {}
        self.units: dict[str, float] = {}  # seconds of setup, call and teardown per unit of work (_scope)
        self.cpu: dict[str, float] = {}  # CPU seconds of the same (cpu_seconds)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        unit = _scope(report.nodeid)
        self.units[unit] = self.units.get(unit, 0.0) + report.duration
        properties = dict(report.user_properties)
        self.cpu[unit] = self.cpu.get(unit, 0.0) + float(properties.get("cpu_seconds", 0.0))
        ray = float(properties.get("ray_group_cpu_seconds", 0.0))
        if ray:
            self.cpu[RAY_GROUP] = self.cpu.get(RAY_GROUP, 0.0) + ray
        if report.when == "call":
            reason = dict(report.user_properties).get("slow_reason", "")
            self.calls[report.nodeid] = (report.duration, str(reason))

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        over = sorted(
            ((took, nodeid, reason) for nodeid, (took, reason) in self.calls.items() if took > BUDGET_SECONDS),
            reverse=True,
        )
        write = terminalreporter.write_line
        terminalreporter.section(f"test budget: {BUDGET_SECONDS:g} s a test (its call phase)")
        write(f"suite: {len(self.calls)} tests called in {time.monotonic() - self.started:.1f} s of wall time")
        for took, nodeid, reason in over:
            write(f"{took:7.1f} s  {nodeid}  [{reason or 'NO REASON: say why in its docstring (' + SLOW_REASON + ')'}]")
        missing = sum(1 for _, _, reason in over if not reason)
        write(f"{len(over)} over budget, {missing} of them without a reason" if over else "none over budget")
        # The suite's length is set by its longest units (each runs on one worker) and by the work of all of them.
        longest = sorted(((took, unit) for unit, took in self.units.items() if took > UNIT_SHOWN_SECONDS), reverse=True)
        write(
            f"units of work over {UNIT_SHOWN_SECONDS:g} s: {len(longest)} of {len(self.units)}"
            f" ({sum(self.units.values()):.0f} s of work in all, {sum(self.cpu.values()):.0f} s of CPU):"
        )
        for took, unit in longest:
            write(f"{took:7.1f} s  {self.cpu.get(unit, 0.0):7.1f} s CPU  {unit}")
        hungriest = sorted(((cpu, unit) for unit, cpu in self.cpu.items()), reverse=True)[:15]
        write("the units that took the most CPU (this process's threads and the children it waited for):")
        for cpu, unit in hungriest:
            write(f"{cpu:7.1f} s CPU  {self.units.get(unit, 0.0):7.1f} s  {unit}")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) sums the budget
        config.pluginmanager.register(Budget(), "ssi-test-budget")
