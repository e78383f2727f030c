"""Fixtures of the cluster tests: a generated corpus, a small bundle over it, the brute-force oracle, and the local
Ray cluster that the Serve modules share."""

from __future__ import annotations

import builtins
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ssi.records import Document
from tests.service.service_testing import Oracle, free_port, make_bundle, make_corpus, write_corpus

# Every module of the Ray group (tests/conftest.py's RAY_MODULES) runs on one shared local cluster, started once: a
# head and three labelled worker nodes (replicated shards put copy i on node n<i>), Serve's proxy on one port.
# Starting a cluster and Serve is most of a small module's time. Each module deletes its applications when it ends;
# a module that kills a worker node starts it again under its label before it ends. Any other module (a worker that
# goes on to other work once the group is done: tests/conftest.py) shuts it down first.
SHARED_RAY_MODULES = frozenset(
    {"test_cluster_faults", "test_cluster_match", "test_cluster_ray", "test_ray_train", "test_replication_ray"}
)
WORKER_NODES = 3
CPUS_PER_NODE = 1  # four CPUs in all: Ray Train's two workers, or Ray Data's tasks beside Serve's replicas (0 CPUs)

# What a cluster does for its operators and no test reads, off (each Ray process reads them from its environment):
# metrics export, the dashboard agents' process stats every 5 s, task events, event-loop stats, workers started
# before anything asks for them. With the log monitor off and one Serve proxy (on the head, which every test
# calls), the group's Ray processes took ~380 s of CPU instead of ~405 s (psutil, sampled each second).
QUIET_RAY = {
    "RAY_enable_metrics_collection": "0",
    "REPORTER_UPDATE_INTERVAL_MS": "60000",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    "RAY_task_events_report_interval_ms": "0",
    "RAY_event_stats": "0",
    # Idle workers kept for the next task instead of killed a second after their last (a raylet kills idle ones while
    # its workers, actors included, outnumber this limit, its CPUs by default: one here, below its Serve replicas).
    "RAY_num_workers_soft_limit": "16",
}


@dataclass(frozen=True, slots=True)
class SharedRay:
    local: Any  # cluster.local.LocalCluster
    port: int  # Serve's HTTP proxy

    @property
    def address(self) -> str:
        return self.local.address

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


_shared: SharedRay | None = None


def shared_ray() -> SharedRay:
    """The shared cluster, started (with Serve's proxy) on first use and joined by this process."""
    global _shared
    if _shared is None:
        # Ray starts its workers (every Serve replica, Ray Data task and Ray Train worker) at niceness 15, below the
        # other pytest-xdist workers (tests/conftest.py: 10), which would take the cores from the Ray group, the
        # longest unit: at 0 they come first, as the group's own process does.
        os.environ.setdefault("RAY_worker_niceness", "0")
        for name, value in QUIET_RAY.items():
            os.environ.setdefault(name, value)
        from cluster.deploy import start_proxies
        from cluster.local import LocalCluster
        from service.settings import Settings

        # Ray's GCS fault tolerance on (its tables in a Redis the cluster starts): test_replication_ray kills the GCS
        # and starts it again, and its coordinator keeps the shard map in the same Redis. Without Debian's
        # redis-server (or the redis client) the cluster runs without it, and that test skips.
        with_redis = shutil.which("redis-server") is not None and importlib.util.find_spec("redis") is not None
        redis_dir = Path(tempfile.mkdtemp(prefix="ssi-shared-ray-redis-")) if with_redis else None
        local = LocalCluster(
            workers=WORKER_NODES,
            cpus_per_node=CPUS_PER_NODE,
            object_store_mb=128,
            log_monitor=False,
            redis_dir=redis_dir,
        )
        try:
            local.connect()
            port = free_port()
            start_proxies(Settings(host="127.0.0.1", port=port), every_node=False)
        except BaseException:
            local.shutdown()
            raise
        _shared = SharedRay(local, port)
    return _shared


def release_shared_ray() -> None:
    """Shut the shared cluster down (no-op when none runs), keeping the builtin print (_keep_builtin_print)."""
    global _shared
    if _shared is None:
        return
    from ray import serve

    saved = builtins.print
    try:
        serve.shutdown()
    finally:
        _shared.local.shutdown()
        if _shared.local.redis is not None:
            shutil.rmtree(_shared.local.redis.folder, ignore_errors=True)
        _shared = None
        builtins.print = saved


@pytest.fixture(autouse=True, scope="session")
def _release_shared_ray_at_the_end() -> Iterator[None]:
    yield
    release_shared_ray()


@pytest.fixture(autouse=True, scope="module")
def _keep_builtin_print() -> Iterator[None]:
    """`ray.shutdown()` leaves `builtins.print` replaced by Ray's wrapper, which numba cannot type: the
    numba kernels of tests run later in the same process (correlated hashing, EM) then fail to compile."""
    saved = builtins.print
    yield
    builtins.print = saved


COLORS = [f"c{j:02d}" for j in range(14)]  # a keyword of the world's fields, drawn most often first


def with_fields(docs: list[Document]) -> list[Document]:
    """Five documents of six with fields (service.fields), the same on every run: a keyword `color` of 14 values,
    skewed so that the shards' most frequent values differ (what a facet must merge exactly), an integer `n`, a
    keyword list `tags` on a third of them and a date `day` on a quarter."""
    rng = np.random.default_rng(5)
    weights = 1.0 / np.arange(1, len(COLORS) + 1) ** 0.6
    weights /= weights.sum()
    out = []
    for i, doc in enumerate(docs):
        color = COLORS[int(rng.choice(len(COLORS), p=weights))]
        tags = sorted({str(t) for t in rng.choice(["a", "b", "c", "d", "e"], size=2)})
        if i % 6 == 5:
            out.append(doc)
            continue
        fields: dict[str, Any] = {"color": color, "n": i}
        if i % 3 == 0:
            fields["tags"] = tags
        if i % 4 == 0:
            fields["day"] = f"2024-05-{i % 28 + 1:02d}"
        out.append(replace(doc, fields=fields))
    return out


def jsonl_block(corpus: Any) -> Any:
    """A JSONL corpus as the Ray index job's read gives it to an embedding task (cluster.ray_index: Ray Data's
    read_text, an Arrow table of the lines, for `embed_batch(..., lines=True)`)."""
    import pyarrow as pa

    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    return pa.table({"text": lines})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 300-document corpus file (most documents with fields: `with_fields`), a lowrank bundle over its words and
    the oracle (brute force of the form's score)."""
    root = tmp_path_factory.mktemp("cluster-world")
    docs = with_fields(make_corpus(300, seed=3))
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundle = make_bundle(root / "bundle", docs)
    return {"root": root, "docs": docs, "corpus": corpus, "bundle": bundle, "oracle": Oracle(bundle, docs)}


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's redis-server on a free port, persistence on (cluster.redis_server), its files in a temporary folder."""
    pytest.importorskip("redis", reason="needs the cluster extra: pip install -e .[cluster]")
    from cluster.redis_server import RedisServer

    try:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()
