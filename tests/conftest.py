"""The whole session's set-up: an on-disk cache of compiled numba kernels, shared by the session's processes.

Every server a test starts (in a thread, as a subprocess, each worker of a group, each restart of the crash loop)
compiles the kernels of service.topk, service.quantized and service.lexical before it serves: seconds each on a
small machine, more than the rest of a small collection's load. With NUMBA_CACHE_DIR set (service.jit_cache) the
first process to need a kernel compiles it and the later ones load it; subprocesses inherit the variable.

The folder outlives the session, as numba's own cache beside a library's sources does: it is where every
`cache=True` function of the session goes once NUMBA_CACHE_DIR is set (ranx's metrics too, whose compiling took
most of a minute), so a new folder each session would compile those again every time. numba keys each entry by
the function's source file (its path, size and time), its bytecode, the argument types and the CPU, so an edited
kernel is compiled again. Set here, before any test module imports the service: whether the service's kernels
cache is decided when their module is imported. A NUMBA_CACHE_DIR already set is kept.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

if not os.environ.get("NUMBA_CACHE_DIR"):
    user = os.getuid() if hasattr(os, "getuid") else "user"
    os.environ["NUMBA_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"ssi-tests-numba-cache-{user}")
