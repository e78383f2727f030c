"""Bounds on the thread pools of the numeric libraries, so one process does not oversubscribe its cores.

- OpenMP (FAISS): `OMP_NUM_THREADS` for the process, and idle workers sleep instead of spinning
  (`OMP_WAIT_POLICY=PASSIVE`); each search also sets its own count (see service.index).
- BLAS (numpy/scipy, OpenBLAS): one thread. The service's BLAS calls are small (one query's
  candidates, a few encoder probes) and requests already run in parallel; a multi-threaded OpenBLAS
  on a busy 2-core machine turned a 4 × 4500 by 4500 × 32 product from 0.1 ms into 350 ms (measured
  here, load average 7). numpy is often imported before `ssi serve` runs, too late for
  `OPENBLAS_NUM_THREADS`, so the limit is set at runtime with threadpoolctl.
- onnxruntime: the session's own options (service.encoder).
- glibc malloc: at most `MALLOC_ARENAS` arenas. glibc gives each thread that allocates its own arena
  (up to 8 per core), and freed memory stays in them: under a soak of searches, batches and writes on
  Wikispeedia the server's RSS grew 51 MB in 5 minutes with the default and 13 MB with 2 arenas
  (benchmarks/soak.py, MALLOC_ARENA_MAX=2). The limit is set with mallopt at start, before the server's
  threads exist, unless the operator set MALLOC_ARENA_MAX.
- Python's cyclic garbage collector: a loaded collection is hundreds of thousands of long-lived
  objects (document ids, the row table), and every full collection walked them all while holding the
  GIL: 70–80 ms each on 100k passages, eight times in 30 s of searching at 32 clients, which made the
  p99 latency (148–157 ms against a p50 of 50 ms). `freeze_loaded_objects` moves what a load made into
  the collector's permanent generation once it is in place: p99 84–97 ms in the same runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os

log = logging.getLogger(__name__)


def bound_thread_environment(threads: int) -> None:
    """Defaults read when the libraries load, unless the operator set them."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")


def limit_blas_threads() -> None:
    """One BLAS thread for the whole process, even if numpy was loaded before the environment was set."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: without it, OPENBLAS_NUM_THREADS (set before numpy loads) is the bound
        log.warning("threadpoolctl is not installed: BLAS threads are bounded only by OPENBLAS_NUM_THREADS")
        return
    threadpool_limits(limits=1, user_api="blas")


MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def libc() -> ctypes.CDLL | None:
    """The C library, for the few calls the service makes into it (None where it cannot be found or loaded)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Bound glibc's malloc arenas (returns whether it was set); a no-op elsewhere or if MALLOC_ARENA_MAX is set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    lib = libc()
    try:
        return lib is not None and bool(lib.mallopt(_M_ARENA_MAX, arenas))
    except AttributeError:  # not glibc (musl, macOS): nothing to bound
        return False


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the system (glibc malloc_trim) after a large structure was dropped.

    An online compaction or a reload builds a new index beside the live one and then drops the old one;
    glibc keeps those pages otherwise, and RSS steps up at each swap. Returns whether it ran.
    """
    lib = libc()
    try:
        return lib is not None and bool(lib.malloc_trim(0))
    except AttributeError:  # not glibc: nothing to trim
        return False


def freeze_loaded_objects() -> None:
    """Collect once, then keep every object alive now out of later collections (gc.freeze).

    Called when a collection's state was loaded or swapped in: its objects live until the next swap, and
    a full collection walking them stalled every request (the module docstring). Frozen objects are still
    freed by reference counting when a later swap drops them; only a reference cycle among them would stay.
    """
    gc.collect()
    gc.freeze()


def thaw_loaded_objects() -> None:
    """Hand frozen objects back to the collector (a closed app in a process that goes on, such as a test's)."""
    gc.unfreeze()
