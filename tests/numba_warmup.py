"""Fill the suite's numba cache (NUMBA_CACHE_DIR, set by tests/conftest.py) once, before pytest-xdist starts
its workers.

Each worker process would otherwise compile, on first use, the same cached kernels as the others, at the same
time, racing to write the same cache files: ranx's metrics (12-16 s to compile; scripts/install.sh compiles them
into ranx's own folder, which a NUMBA_CACHE_DIR bypasses, so they are copied from there: adopt_in_tree_cache) and
the service's kernels (ssi.jit_cache). A kernel found in the cache is loaded instead (well under a second), so a
run whose cache is already full spends here little more than the imports. The forms' and the trainer's cached
kernels are not warmed here: the first test that uses them fills the cache with them.

The parts run as subprocesses, side by side: the test run's own process imports none of it, and coverage does
not count the warm-up as testing.

    python -m tests.numba_warmup [ranx] [service]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
PARTS = ("ranx", "service")


def warm_ranx() -> None:
    """ranx's metrics on the arrays of training.evaluate.metrics, which every `ssi eval` and `evaluate` of the
    tests takes (the suite does not use its dict API, Qrels and Run, whose typed containers no cache keeps).
    What scripts/install.sh compiled beside ranx is copied into the suite's cache first, so that they load."""
    import ranx

    from training.evaluate.metrics import compile_ranx

    adopt_in_tree_cache(Path(os.path.abspath(ranx.__file__)).parent, Path(os.environ["NUMBA_CACHE_DIR"]))
    compile_ranx()


def adopt_in_tree_cache(package: Path, cache_dir: Path) -> int:
    """Copy the numba cache files that a package's kernels left in its own __pycache__ folders (numba's default
    place) to where they are looked for once NUMBA_CACHE_DIR is set (numba.core.caching's
    _UserProvidedCacheLocator: a folder named for the source's folder and the sha1 of its path). An index names
    its source file's time stamp and size, so a copy whose source changed is not used. Returns the files copied."""
    copied = 0
    for pycache in package.rglob("__pycache__"):
        source_dir = str(pycache.parent)
        target = cache_dir / f"{pycache.parent.name}_{hashlib.sha1(source_dir.encode()).hexdigest()}"
        for path in pycache.iterdir():
            if path.suffix in (".nbi", ".nbc") and not (target / path.name).exists():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target / path.name)
                copied += 1
    return copied


def warm_service() -> None:
    """The service's cached kernels, for the array types a server passes them (what a server warms at start)."""
    from service import int8_gemm, lexical, quantized, topk

    topk.warm()
    quantized.warm()
    int8_gemm.warm()
    for writeable in (True, False):  # an index built in memory, and a base mapped read-only from a snapshot
        matrix = lexical._csc(sp.csc_matrix(np.eye(2, dtype=np.float32)), 2)
        for array in (matrix.indptr, matrix.indices, matrix.data):
            array.flags.writeable = writeable
        lexical._warm_kernels(matrix)


def run_parts() -> str:
    """Warm every part in its own subprocess, all at once; one line saying how long each took (and any failure:
    the tests then compile what they use themselves, as without the warm-up)."""
    if not os.environ.get("NUMBA_CACHE_DIR"):
        return "numba warm-up: skipped (no NUMBA_CACHE_DIR to fill)"
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    running = {
        part: subprocess.Popen(
            [sys.executable, "-m", "tests.numba_warmup", part],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for part in PARTS
    }
    said = []
    for part, process in running.items():
        output, _ = process.communicate()
        if process.returncode == 0:
            said.append(output.strip() or part)
        else:
            said.append(f"{part} FAILED (exit {process.returncode}): {output.strip()[-2000:]}")
    took = time.perf_counter() - started
    return f"numba warm-up: {took:.1f} s into {os.environ['NUMBA_CACHE_DIR']} ({'; '.join(said)})"


def main(parts: list[str]) -> None:
    for part in parts or PARTS:
        started = time.perf_counter()
        {"ranx": warm_ranx, "service": warm_service}[part]()
        print(f"{part} {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
