"""Joining a Ray cluster: `local` starts one in this process (for a laptop, tests and the benchmark), any
other address joins a running cluster (`auto`, `ray://host:10001`, `host:6379`)."""

from __future__ import annotations

import os
from typing import Any

# Ray Serve kills an HTTP proxy that is not ready within 5 s (and one whose health check takes 10 s). On a slow or
# busy machine (two cores shared with other work) a proxy can take longer, and the kill failed the whole first
# start (`serve.start` raised ActorDiedError: "killed by ray.kill", "cancelled before it started running"). Serve
# reads these bounds in its controller, a process the cluster starts: they must be in the environment before the
# cluster's processes are. A value the operator set is kept.
SERVE_START_BOUNDS = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30"}


def widen_serve_start_bounds() -> None:
    """Give Serve's proxies time to start on a slow machine (SERVE_START_BOUNDS), before any Ray process starts."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    for name, value in SERVE_START_BOUNDS.items():
        os.environ.setdefault(name, value)


def connect(address: str, num_cpus: int | None = None, object_store_mb: int | None = None) -> Any:
    """ray.init for `address`; a no-op when this process is already connected. Returns the ray module."""
    import ray

    if ray.is_initialized():
        return ray
    widen_serve_start_bounds()
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning", "log_to_driver": False}
    if address == "local":
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
        if object_store_mb:
            kwargs["object_store_memory"] = object_store_mb * 1024 * 1024
        ray.init(address="local", **kwargs)  # a new instance, even when a cluster runs on this machine
    else:
        ray.init(address=address, logging_level="warning", log_to_driver=False)
    return ray
