"""Fixtures of the cluster tests: a generated corpus, a small bundle over it and the brute-force oracle."""

from __future__ import annotations

import builtins
from collections.abc import Iterator

import pytest

from tests.service.service_testing import Oracle, make_bundle, make_corpus, write_corpus


@pytest.fixture(autouse=True, scope="module")
def _keep_builtin_print() -> Iterator[None]:
    """`ray.shutdown()` leaves `builtins.print` replaced by Ray's wrapper, which numba cannot type: the
    numba kernels of tests run later in the same process (correlated hashing, EM) then fail to compile."""
    saved = builtins.print
    yield
    builtins.print = saved


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 300-document corpus file, a lowrank bundle over its words and the oracle (brute force of the form's score)."""
    root = tmp_path_factory.mktemp("cluster-world")
    docs = make_corpus(300, seed=3)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundle = make_bundle(root / "bundle", docs)
    return {"root": root, "docs": docs, "corpus": corpus, "bundle": bundle, "oracle": Oracle(bundle, docs)}
