"""HTTP load from wrk (a C load generator, Debian package `wrk`) where it is installed.

On a 2-core machine the Python client (service.bench.load's httpx loop) costs more CPU per request
than a fast server does, so it measured itself: GET /healthz gave 595 q/s at 1 client and 174 q/s
at 32. wrk drives the same requests from one epoll thread for a few microseconds each, so what is
left is the server. The request bodies go to wrk in a generated Lua script (one body per request,
in turn) and its `done` hook prints the summary as one JSON line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

WRK = "wrk"

_SCRIPT = """\
local bodies = {{
{bodies}
}}
local i = 0
request = function()
  {request}
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\n{{"requests": %d, "errors": %d, "duration_us": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "mean_us": %f}}\\n',
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean))
end
"""


def available() -> bool:
    return shutil.which(WRK) is not None


def _long_string(text: str) -> str:
    """`text` as a Lua long string whose bracket level does not occur inside it."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def script(bodies: list[dict[str, Any]], path: str) -> str:
    """The Lua script: POST `path` with each body in turn, or GET `path` when there are no bodies."""
    if bodies:
        listed = ",\n".join(_long_string(json.dumps(body)) for body in bodies)
        request = (
            "i = i % #bodies + 1\n  return wrk.format('POST', "
            + json.dumps(path)
            + ", {['Content-Type'] = 'application/json'}, bodies[i])"
        )
    else:
        listed = ""
        request = f"return wrk.format('GET', {json.dumps(path)})"
    return _SCRIPT.format(bodies=listed, request=request)


def run(url: str, bodies: list[dict[str, Any]], clients: int, seconds: float, path: str) -> dict[str, Any]:
    """wrk's summary of `clients` connections for `seconds`: requests, errors (non-2xx and socket), µs percentiles."""
    with tempfile.TemporaryDirectory(prefix="ssi-wrk-") as folder:
        lua = Path(folder) / "load.lua"
        lua.write_text(script(bodies, path), encoding="utf-8")
        command = [
            WRK, "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--timeout", "60s", "-s", str(lua), url,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"requests"')]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(lines[-1])
