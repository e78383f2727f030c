"""Fixtures shared by the service tests (the helpers they use live in service_testing.py)."""

from __future__ import annotations

import pytest
from service_testing import Oracle, make_bundle, make_corpus, write_corpus


@pytest.fixture(scope="module")
def small_world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 400-document corpus file, its bundle and the brute-force oracle (shared by a test module)."""
    root = tmp_path_factory.mktemp("world")
    docs = make_corpus(400, seed=0)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundle = make_bundle(root / "bundles" / "current", docs)
    return {"root": root, "docs": docs, "corpus": corpus, "bundle": bundle, "oracle": Oracle(bundle, docs)}
