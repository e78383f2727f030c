"""The BM25 weighting (ssi.weighting): q·d ranks as BM25 does, each side is weighted as documented, the
bundle records it, and a bundle without the field is tf-idf."""

from __future__ import annotations

import json
from pathlib import Path

import bm25s
import numpy as np
import pytest

from ssi.bundle import BundleError, content_hash, load_bundle, pipeline_of
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary
from ssi.weighting import BM25_SCHEME, Bm25, WeightingError, bm25_idf
from tests.ssi.random_bundle import lowrank_bundle

TEXTS = [
    "The cat sat on the mat and the cat slept.",
    "A dog chased the cat around the garden; the dog barked.",
    "Quantum chromodynamics describes quarks and gluons.",
    "Gluons bind quarks; the strong force is short ranged and strong.",
    "The garden has roses, tulips and a small pond with fish.",
    "Fish swim in the pond while the cat watches the fish.",
    "Stock markets fell as investors sold shares in banks.",
    "Banks raised interest rates; markets and shares reacted.",
]
QUERIES = ["cat", "the cat and the dog", "quarks gluons strong", "fish pond garden fish", "banks shares the"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.build(TEXTS, min_df=1, bm25=Bm25(k1=1.2, b=0.75))


def test_the_lexical_part_is_bm25_over_a_query_constant(vocab: Vocabulary) -> None:
    """q·d · ‖idf ∘ qtf‖ equals bm25s's Lucene BM25 of every (query, document), words repeated or not."""
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    tokens = [tokenize(t) for t in TEXTS]
    words = sorted({w for doc in tokens for w in doc})
    column = {w: i for i, w in enumerate(words)}
    retriever.index(([[column[w] for w in doc] for doc in tokens], column), show_progress=False)
    X = vocab.featurize_documents(TEXTS)
    for query in QUERIES:
        expected = retriever.get_scores([column[w] for w in tokenize(query)])
        q = vocab.featurize_queries([query])
        counts = {w: tokenize(query).count(w) for w in set(tokenize(query))}
        scale = np.linalg.norm([vocab.idf[vocab.id_of(w)] * c for w, c in counts.items()])
        got = (X @ q.T).toarray().ravel() * scale
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        assert list(np.argsort(-got, kind="stable")[:3]) == list(np.argsort(-expected, kind="stable")[:3])


def test_each_side_is_weighted_as_documented(vocab: Vocabulary) -> None:
    assert vocab.tf_scheme == BM25_SCHEME and vocab.lexical == "bm25" and not vocab.symmetric
    lengths = [len(tokenize(t)) for t in TEXTS]
    assert vocab.bm25 is not None and vocab.bm25.avg_len == pytest.approx(np.mean(lengths))
    df = np.array([sum(w in set(tokenize(t)) for t in TEXTS) for w in vocab.words])
    np.testing.assert_allclose(vocab.idf, np.log1p((len(TEXTS) - df + 0.5) / (df + 0.5)), rtol=1e-6)
    d = vocab.featurize_documents([TEXTS[0]])
    cat = vocab.id_of("cat")
    norm = 1.2 * (1 - 0.75 + 0.75 * lengths[0] / vocab.bm25.avg_len)
    assert d[0, cat] == pytest.approx(2 / (2 + norm), rel=1e-6)  # "cat" twice, saturated, in [0, 1)
    assert d.data.max() < 1.0 and d.data.min() > 0.0
    q = vocab.featurize_queries(["cat cat mat"])
    assert np.linalg.norm(q.data) == pytest.approx(1.0, rel=1e-6)
    mat = vocab.id_of("mat")
    assert q[0, cat] / q[0, mat] == pytest.approx(2 * vocab.idf[cat] / vocab.idf[mat], rel=1e-6)


def test_a_document_row_does_not_depend_on_the_others_nor_on_the_batch(vocab: Vocabulary) -> None:
    """The average length is the bundle's, fixed at training: a document added later, alone or in a batch,
    gets the row it would have had beside any others, and none of the stored rows moves."""
    new = "A cat and a dog in the garden by the pond."
    alone = vocab.featurize_documents([new])
    batch = vocab.featurize_documents([*TEXTS, new])
    assert (alone != batch[len(TEXTS)]).nnz == 0
    assert (batch[: len(TEXTS)] != vocab.featurize_documents(TEXTS)).nnz == 0
    q_alone = vocab.featurize_queries([QUERIES[1]])
    assert (q_alone != vocab.featurize_queries(QUERIES)[1]).nnz == 0


def test_a_bm25_vocabulary_refuses_to_guess_the_side(vocab: Vocabulary) -> None:
    with pytest.raises(ValueError, match="weighs queries and documents apart"):
        vocab.featurize(["cat"])
    tfidf = Vocabulary.build(TEXTS, min_df=1)
    assert tfidf.symmetric and (tfidf.featurize(["cat"]) != tfidf.featurize_queries(["cat"])).nnz == 0


def test_bad_parameters_are_refused() -> None:
    for k1, b, avg in ((0.0, 0.75, 10.0), (1.2, 1.5, 10.0), (1.2, 0.75, 0.0), (float("nan"), 0.5, 1.0)):
        with pytest.raises(WeightingError):
            Bm25(k1=k1, b=b, avg_len=avg)
    assert bm25_idf(np.array([1, 8]), 8).min() > 0  # Lucene's idf: positive even for a word in every document


def test_the_bundle_records_the_weighting_and_reads_it_back(vocab: Vocabulary, tmp_path: Path) -> None:
    path = lowrank_bundle(tmp_path, vocab)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["tf_scheme"] == BM25_SCHEME
    assert manifest["lexical"] == {"scheme": "bm25", "k1": 1.2, "b": 0.75, "avg_len": vocab.bm25.avg_len}
    loaded = load_bundle(path)
    assert loaded.vocab.bm25 == vocab.bm25 and np.array_equal(loaded.vocab.idf, vocab.idf)
    assert (loaded.vocab.featurize_documents(TEXTS) != vocab.featurize_documents(TEXTS)).nnz == 0


def write_rehashed(path: Path, manifest: dict) -> None:
    pipeline = pipeline_of(manifest["tokenizer"], manifest["tf_scheme"], manifest.get("lexical"))
    manifest["content_hash"] = content_hash(manifest["files"], pipeline)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_a_bundle_without_the_field_is_tfidf_and_a_broken_one_is_refused(tmp_path: Path) -> None:
    tfidf = Vocabulary.build(TEXTS, min_df=1)
    path = lowrank_bundle(tmp_path, tfidf)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["lexical"] is None
    del manifest["lexical"]  # as every bundle written before the field existed
    (path / "manifest.json").write_text(json.dumps(manifest))
    loaded = load_bundle(path)
    assert loaded.vocab.lexical == "tfidf" and loaded.vocab.symmetric
    manifest["lexical"] = {"scheme": "bm25", "k1": 1.2, "b": 0.75, "avg_len": 10.0}  # but tf_scheme says tf-idf
    write_rehashed(path, manifest)  # as a faulty writer would, whose hash covers what it wrote
    with pytest.raises(BundleError, match="do not go together"):
        load_bundle(path)
    manifest.update(tf_scheme=BM25_SCHEME, lexical={"scheme": "bm25", "k1": -1, "b": 0.75, "avg_len": 10.0})
    write_rehashed(path, manifest)
    with pytest.raises(BundleError, match="k1 must be > 0"):
        load_bundle(path)
