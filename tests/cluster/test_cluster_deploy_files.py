"""The deployment files for a real cluster (deploy/ray/): they parse, and the Serve entry they name builds the app.

They cannot run here (no cloud, no Kubernetes); what can be checked is that `ray up` and KubeRay would
read them and that `cluster.deploy:build`, the import path of the RayService, accepts its arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")

from cluster.deploy import build  # noqa: E402
from cluster.index_job import build_index  # noqa: E402
from cluster.manifest import ClusterIndexError  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "ray"


def test_ray_up_config_names_head_and_shard_workers() -> None:
    config = yaml.safe_load((DEPLOY / "ray-up.yaml").read_text(encoding="utf-8"))
    assert config["head_node_type"] in config["available_node_types"]
    assert any("--extras serve,cluster" in command for command in config["setup_commands"])


def test_rayservice_builds_the_router_over_the_index(world: dict, tmp_path: Path) -> None:
    service = yaml.safe_load((DEPLOY / "kuberay-rayservice.yaml").read_text(encoding="utf-8"))
    assert service["kind"] == "RayService"
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    assert app["import_path"] == "cluster.deploy:build"
    index = tmp_path / "index"
    build_index(world["corpus"], world["bundle"], index, 2)
    args = {**app["args"], "index": str(index)}
    assert type(build(args)).__name__ == "Application"
    with pytest.raises(ClusterIndexError, match="need 'index'"):
        build({"shards": "2"})
    with pytest.raises(ClusterIndexError, match="not a sharded index"):
        build({"index": str(tmp_path)})
