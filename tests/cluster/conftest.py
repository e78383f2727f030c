"""Fixtures of the cluster tests: a generated corpus, a small bundle over it, the brute-force oracle, and the local
Ray cluster that the Serve modules share."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.service.service_testing import Oracle, free_port, make_bundle, make_corpus, write_corpus

# The modules that deploy their Serve applications on one shared cluster (a head and two labelled worker nodes,
# Serve's proxy on one port), one after the other in the Ray group (tests/conftest.py): starting a cluster and
# Serve is most of a module's time, so three modules start it once. Each deletes its applications when it ends.
# Any other module (its own cluster: nodes killed, Ray Train's own instance) shuts the shared one down first.
SHARED_RAY_MODULES = frozenset({"test_cluster_faults", "test_cluster_match", "test_cluster_ray"})


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
        from cluster.deploy import start_proxies
        from cluster.local import LocalCluster
        from service.settings import Settings

        local = LocalCluster(workers=2, cpus_per_node=1, object_store_mb=128)  # two labelled nodes: replicas=2
        try:
            local.connect()
            port = free_port()
            start_proxies(Settings(host="127.0.0.1", port=port))
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
        _shared = None
        builtins.print = saved


@pytest.fixture(autouse=True, scope="module")
def _own_cluster_first(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module that is not one of SHARED_RAY_MODULES starts with no shared cluster running."""
    if request.module.__name__.rsplit(".", 1)[-1] not in SHARED_RAY_MODULES:
        release_shared_ray()
    yield


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


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 300-document corpus file, a lowrank bundle over its words and the oracle (brute force of the form's score)."""
    root = tmp_path_factory.mktemp("cluster-world")
    docs = make_corpus(300, seed=3)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundle = make_bundle(root / "bundle", docs)
    return {"root": root, "docs": docs, "corpus": corpus, "bundle": bundle, "oracle": Oracle(bundle, docs)}
