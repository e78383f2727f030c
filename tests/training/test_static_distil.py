"""A static encoder distilled from the run's tiny exported encoder (training.static_distil): its graph gives what
numpy's Gather and mean of the table give, a one-token text keeps the source's own vector, and the folder goes into a
bundle, says what it is there, and is served by a real server exactly as the brute force ranks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssi.bundle import load_bundle
from ssi.sentence import SentenceEncoder, SentenceError, read_spec, write_spec
from tests.service.service_testing import (
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    probe_queries,
    write_corpus,
)
from tests.training.sentence_testing import WORDS, exported_tiny_encoder
from training.sentence_export import cosines
from training.sentence_vectors import _key
from training.static_distil import (
    TokenTable,
    principal_axes,
    sif_weights,
    token_table,
    write_static,
    zipf_probabilities,
)

TEXTS = ("the star and the moon", "bread dough, flour and yeast!", "violin", "zq 42 unknownword")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return exported_tiny_encoder(tmp_path_factory).sentence


@pytest.fixture(scope="module")
def tokens(source: Path) -> TokenTable:
    return token_table(source, threads=1)


def test_the_graph_gives_the_tables_gather_and_mean(tokens: TokenTable, source: Path, tmp_path: Path) -> None:
    spec = write_static(tokens, tmp_path / "static", rows="mean", dims=16, weighting="zipf")
    assert (spec.kind, spec.dims, spec.pooling, spec.normalize) == ("static", 16, "mean", True)
    assert spec.static is not None and spec.static.source == read_spec(source).name and spec.static.pca
    assert spec.static.tokens == len(tokens.mean) and spec.inputs == read_spec(source).inputs
    table = principal_axes(tokens.mean, 16, tokens.special) * sif_weights(zipf_probabilities(len(tokens.mean)))[:, None]
    table[tokens.special] = 0.0
    encoder = SentenceEncoder(tmp_path / "static")
    got = encoder.encode(list(TEXTS))
    ids = encoder.token_ids(list(TEXTS))
    assert all(len(row) > 2 and tokens.special.tolist() == sorted({row[0], row[-1]}) for row in ids)
    want = np.stack([table[row].mean(axis=0) for row in ids])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # Batched with texts of other lengths (padding), each text's vector is its own.
    np.testing.assert_allclose(
        encoder.encode([*TEXTS, "the " * 30]), [*want, encoder.encode(["the " * 30])[0]], atol=1e-5
    )


def test_without_pca_or_weights_a_one_token_text_keeps_the_sources_vector(tokens: TokenTable, source: Path, tmp_path):
    write_static(tokens, tmp_path / "static", rows="mean", weighting="none")
    words = list(WORDS[10:20])
    assert cosines(SentenceEncoder(tmp_path / "static").encode(words), SentenceEncoder(source).encode(words)).min() > (
        0.9999
    )
    # Two tables of one source are two encoders to the corpus's vector cache, and neither is the source.
    write_static(tokens, tmp_path / "pca", rows="mean", dims=32, weighting="none")
    keys = {_key(SentenceEncoder(folder), words) for folder in (tmp_path / "static", tmp_path / "pca", source)}
    assert len(keys) == 3
    with pytest.raises(SentenceError, match="counts weighting needs texts"):
        write_static(tokens, tmp_path / "other", dims=16, weighting="counts")
    with pytest.raises(SentenceError, match="--dims 64"):
        write_static(tokens, tmp_path / "other", dims=64)


def test_a_static_hybrid_bundle_says_what_it_is_and_serves_exactly(
    tokens: TokenTable, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The sentence part must change some top k against the same bundle without it, or the test would not test it."""
    root = tmp_path_factory.mktemp("static-hybrid")
    write_static(tokens, root / "static")  # the defaults: the token's own state, no PCA, Zipf's SIF weights
    write_spec(root / "static", read_spec(root / "static").with_weight(3.0, "test"))
    docs = make_corpus(120, seed=5, vocab_words=300)
    bundle = make_bundle(root / "bundle", docs, n_dims=8, seed=2, lexical="bm25", sentence=root / "static")
    loaded = load_bundle(bundle)
    assert loaded.sentence is not None and loaded.sentence.kind == "static" and loaded.sentence.static is not None
    oracle = Oracle(bundle, docs)
    plain = Oracle(make_bundle(root / "plain", docs, n_dims=8, seed=2, lexical="bm25"), docs)
    queries = probe_queries(docs, 6, seed=4)
    assert any(oracle.top(q, 10)[0] != plain.top(q, 10)[0] for q in queries)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    with ThreadServer(bundle=bundle, corpus=corpus, cache_dir=root / "cache") as server:
        assert server.client.get("/model").json()["index_dims"] == 8 + 32
        for query in queries:
            response = server.client.post("/search", json={"query": query, "k": 10})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], oracle, query, 10)
