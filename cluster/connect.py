"""Joining a Ray cluster: `local` starts one in this process (for a laptop, tests and the benchmark), any
other address joins a running cluster (`auto`, `ray://host:10001`, `host:6379`)."""

from __future__ import annotations

import os
from typing import Any


def connect(address: str, num_cpus: int | None = None, object_store_mb: int | None = None) -> Any:
    """ray.init for `address`; a no-op when this process is already connected. Returns the ray module."""
    import ray

    if ray.is_initialized():
        return ray
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning", "log_to_driver": False}
    if address == "local":
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
        if object_store_mb:
            kwargs["object_store_memory"] = object_store_mb * 1024 * 1024
        ray.init(address="local", **kwargs)  # a new instance, even when a cluster runs on this machine
    else:
        ray.init(address=address, logging_level="warning", log_to_driver=False)
    return ray
