"""The whole session's set-up: one on-disk cache of the service's compiled kernels, shared by its processes.

Every server a test starts (in a thread, as a subprocess, each worker of a group, each restart of the crash loop)
compiles the kernels of service.topk, service.quantized and service.lexical before it serves: seconds each on a
small machine, more than the rest of a small collection's load. With NUMBA_CACHE_DIR set (service.jit_cache) the
first process to need a kernel compiles it and the later ones load it; subprocesses inherit the variable. The
folder is new for each session, so each run compiles the kernels of the code it tests once. Set here, before any
test module imports the service: whether the kernels cache is decided when their module is imported.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_CREATED: str | None = None
if not os.environ.get("NUMBA_CACHE_DIR"):
    _CREATED = tempfile.mkdtemp(prefix="ssi-tests-numba-")
    os.environ["NUMBA_CACHE_DIR"] = _CREATED


def pytest_unconfigure(config: pytest.Config) -> None:
    if _CREATED is not None:
        shutil.rmtree(_CREATED, ignore_errors=True)
