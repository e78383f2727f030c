"""`--ray local` (`ssi train --ray local`, `ssi index --ray local`): cluster.connect starts a Ray instance of its own in
this process, with the CPUs and object store asked for, and a second call while connected changes nothing.

The Ray group's modules join their shared cluster by its address instead (tests/cluster/conftest.py); this module is
not one of them, so it runs on another pytest-xdist worker, where no cluster runs.
"""

from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")


def test_local_starts_an_instance_of_its_own_with_the_resources_asked() -> None:
    import ray

    from cluster.connect import connect

    if ray.is_initialized():
        pytest.skip("this process is already connected to a Ray cluster")
    try:
        assert connect("local", num_cpus=1, object_store_mb=80) is ray
        resources = ray.cluster_resources()
        assert resources["CPU"] == 1 and resources["object_store_memory"] == 80 * 1024 * 1024
        address = ray.get_runtime_context().gcs_address
        assert connect("local", num_cpus=2) is ray and ray.get_runtime_context().gcs_address == address
        assert ray.cluster_resources()["CPU"] == 1  # already connected: nothing started, nothing changed
    finally:
        ray.shutdown()
