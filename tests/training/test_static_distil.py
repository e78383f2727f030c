"""A static encoder distilled from the run's tiny exported encoder (training.static_distil): its graph gives what
numpy's Gather and mean of the table give, a one-token text keeps the source's own vector, and `ssi train --encoder`
puts the folder into a bundle, which says what it is and is served by a real server exactly as the brute force ranks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.sentence import SentenceEncoder, SentenceError, read_spec
from ssi_cli.main import build_app
from tests.service.service_testing import (
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_corpus,
    probe_queries,
    write_corpus,
)
from tests.training.sentence_testing import WORDS, exported_tiny_encoder
from training.evaluate.form_scorer import FormScorer
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
    """`ssi train --encoder DIR` takes the static folder as it is (day one: BM25 + 1 · cosine); a real server ranks as
    the brute force does, and the sentence part changes some top 10 of BM25 alone, or the test would not test it."""
    root = tmp_path_factory.mktemp("static-hybrid")
    static = root / "static"
    write_static(tokens, static)  # the defaults: the token's own state, no PCA, Zipf's SIF weights
    docs = make_corpus(120, seed=5, vocab_words=300)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    args = ["train", "--corpus", str(corpus), "--encoder", str(static), "--out", str(root / "b"), "--no-progress"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    bundle = load_bundle(root / "b")
    assert bundle.sentence is not None and bundle.sentence.kind == "static" and bundle.sentence.weight == 1.0
    assert bundle.sentence.static == read_spec(static).static and bundle.manifest.sentence["kind"] == "static"
    oracle = Oracle(root / "b", docs)
    queries = probe_queries(docs, 6, seed=4)
    lexical = FormScorer(bundle.vocab, bundle.form, docs).score(queries)
    alone = [[docs[i].id for i in np.argsort(-row, kind="stable")[:10]] for row in lexical]
    assert any(oracle.top(q, 10)[0] != ids for q, ids in zip(queries, alone, strict=True))
    with ThreadServer(bundle=root / "b", corpus=corpus, cache_dir=root / "cache") as server:
        assert server.client.get("/model").json()["index_dims"] == 1 + 32
        for query in queries:
            response = server.client.post("/search", json={"query": query, "k": 10})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], oracle, query, 10)
