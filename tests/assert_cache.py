"""Fill pytest's cache of rewritten test modules once, in the controller, before pytest-xdist starts its workers.

pytest rewrites the asserts of every test module and conftest it imports, and keeps the result beside the source
(`__pycache__/*-pytest-*.pyc`), except where PYTHONDONTWRITEBYTECODE is set, as it is on these 2-core machines: there
each of the run's workers rewrote all ~120 modules again when it collected them, some 7 s of CPU each on two cores.
Written here, the workers read them instead (pytest reads its cache whatever that variable says). The files are
pytest's own, written by its own functions; where a pytest version has moved them, nothing is written and each
worker rewrites as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def fill(config: pytest.Config, root: Path) -> int:
    """Rewrite and cache each test module and conftest under `root` that has no cached copy; returns how many."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        read, compile_test, write, cache_dir, tail = (
            rewrite._read_pyc,
            rewrite._rewrite_test,
            rewrite._write_pyc,
            rewrite.get_cache_dir,
            rewrite.PYC_TAIL,
        )
    except (ImportError, AttributeError, KeyError):
        return 0
    patterns = config.getini("python_files") or ["test_*.py"]
    written = 0
    for source in sorted(root.rglob("*.py")):
        if source.name != "conftest.py" and not any(source.match(pattern) for pattern in patterns):
            continue
        pyc = cache_dir(source) / (source.name[:-3] + tail)
        if read(source, pyc, state.trace) is not None:
            continue
        pyc.parent.mkdir(exist_ok=True)
        source_hash, code = compile_test(source, config)
        written += bool(write(state, code, source_hash, pyc))
    return written
