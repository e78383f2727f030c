"""A full disk under the store and the snapshots (issue 27), on a real small filesystem: a tmpfs of a few MB.

Writes are refused with 507 and the reason while there is no room; searches go on; nothing acknowledged is
lost; writes are taken again once space returns; a restart loads what the store holds. Needs root (mount):
skipped with a message where the test cannot mount (SSI_REQUIRE_MOUNT=1 makes that an error).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_testing import API_KEY, ProcessServer, polling_client, process_world

KEY = {"X-API-Key": API_KEY}
SIZE = "6m"
CLIENT = polling_client()  # one client for every request: httpx.post builds one (and its TLS context) per call


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        message = f"cannot mount a {SIZE} tmpfs here ({mounted.stderr.strip() or 'not root'})"
        if os.environ.get("SSI_REQUIRE_MOUNT") == "1":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def write(url: str, batch: int) -> httpx.Response:
    docs = [{"id": f"w{batch}-{j}", "title": f"batch {batch}", "text": f"word{j} " * 400} for j in range(10)]
    return CLIENT.post(f"{url}/documents", json={"documents": docs}, headers=KEY, timeout=60)


def test_a_full_disk_refuses_writes_with_507_and_loses_nothing(small_disk: Path, tmp_path: Path) -> None:
    """Slow: a real server process on a small mounted file system, written to until it is full and restarted."""
    (tmp_path / "world").mkdir()
    world = process_world(tmp_path / "world", 200, seed=4)
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (1 << 20))  # freed later: space returning
    env = {"SSI_CACHE_DIR": str(small_disk / "cache"), "SSI_API_KEY": API_KEY, "SSI_THREADS": "1"}
    env["SSI_SNAPSHOT_EVERY_WRITES"] = "100"  # snapshots run into the full disk too
    args = ["--bundle", str(world["bundle"]), "--corpus", str(world["corpus"])]
    server = ProcessServer(tmp_path, env, args).start()
    acknowledged: list[str] = []
    try:
        refused = None
        for batch in range(2000):
            response = write(server.url, batch)
            if response.status_code != 200:
                refused = response
                break
            acknowledged += response.json()["ids"]
        assert refused is not None and refused.status_code == 507, refused and refused.text
        assert "is full: the write was not applied" in refused.json()["detail"]
        assert write(server.url, 10_000).status_code == 507  # still full: still refused, still no 500
        search = CLIENT.post(f"{server.url}/search", json={"query": world["docs"][0].title, "k": 3}, timeout=30)
        assert search.status_code == 200 and len(search.json()["hits"]) == 3
        assert CLIENT.get(f"{server.url}/documents/{acknowledged[-1]}", timeout=30).status_code == 200

        ballast.unlink()  # room again: writes are taken at once
        again = write(server.url, 20_000)
        assert again.status_code == 200, again.text
        acknowledged += again.json()["ids"]
    finally:
        server.stop()
        log = server.log()
    assert "Traceback" not in log and "Internal Server Error" not in log, log[-3000:]

    restarted = ProcessServer(tmp_path, env, args).start()  # what the store acknowledged, after a restart
    try:
        for doc_id in acknowledged[:: max(1, len(acknowledged) // 50)] + acknowledged[-10:]:
            assert CLIENT.get(f"{restarted.url}/documents/{doc_id}", timeout=30).status_code == 200, doc_id
        ready = CLIENT.get(f"{restarted.url}/readyz", timeout=30).json()["collections"]["documents"]
        assert ready["documents"] == 200 + len(acknowledged)
    finally:
        restarted.stop()
