"""The server bounds glibc's malloc arenas at start (RSS stayed flatter under a soak), unless the operator chose."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from service.threads import limit_malloc_arenas


def test_malloc_arenas_are_bounded_on_glibc_unless_set_by_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    on_glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c")
    assert limit_malloc_arenas() is bool(on_glibc)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False
