"""`ssi.load`: in-process ranking is the brute force of the form's reference score, and needs no PyTorch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import ssi
from ssi.bundle import load_bundle
from ssi.corpus import read_corpus
from ssi.fields.errors import FieldError, FieldTypeMismatch
from ssi.records import Document
from tests.api.conftest import ApiWorld
from tests.service.service_testing import Oracle, make_bundle, make_corpus

QUERIES = ["left0w1 common3", "right1w2 left1w4", "common7 common9 right5w0", "left11w3", "nothing known here"]


def brute_force(oracle: Oracle, query: str, k: int) -> tuple[list[str], np.ndarray]:
    """The k best by the form's reference score over every document, ties by corpus position."""
    f = oracle.form.reference_scores(oracle.featurize(query), oracle.doc_matrix)[0]
    order = np.lexsort((np.arange(f.shape[0]), -f))[:k]
    return [oracle.ids[i] for i in order], f[order]


def test_search_is_the_brute_force_ranking_of_the_reference_score(api_world: ApiWorld) -> None:
    docs = read_corpus(api_world.data.corpus)
    model = ssi.load(api_world.trained, corpus=api_world.data.corpus)
    oracle = Oracle(api_world.trained.bundle, docs)
    assert model.form == "lowrank" and len(model.documents) == len(docs)
    for query, hits in zip(QUERIES, model.search(QUERIES, k=10), strict=True):
        if oracle.featurize(query).nnz == 0:  # no word the model knows: no hits, as from the service
            assert hits == [], query
            continue
        ids, scores = brute_force(oracle, query, 10)
        assert [h.id for h in hits] == ids, query
        np.testing.assert_allclose([h.score for h in hits], scores, rtol=1e-6, atol=1e-6)
        assert [docs[h.position].id for h in hits] == ids
    one, batch = model.search(QUERIES[0], k=3), model.search(QUERIES, k=3)[0]  # one text: one list of hits
    assert [h.id for h in one] == [h.id for h in batch]
    assert [h.score for h in one] == pytest.approx([h.score for h in batch], rel=1e-5)


def test_score_is_the_forms_score_of_the_given_documents(api_world: ApiWorld) -> None:
    bundle = load_bundle(api_world.trained.bundle)
    model = ssi.load(bundle)  # no corpus: it scores given pairs only
    texts = ["left0w1 left0w2 common1", "right0w3 common2", "unrelated words only"]
    got = model.score(QUERIES, texts)
    Q = bundle.vocab.featurize_queries(QUERIES)
    D = bundle.vocab.doc_matrix(bundle.vocab.featurize_documents(texts))
    np.testing.assert_allclose(got, bundle.form.reference_scores(Q, D), rtol=1e-6, atol=1e-7)
    assert got.shape == (len(QUERIES), len(texts)) and got.dtype == np.float32
    as_documents = [Document(f"x{i}", "", t) for i, t in enumerate(texts)]
    np.testing.assert_array_equal(model.score(QUERIES, as_documents), got)
    with pytest.raises(ValueError, match="no corpus"):
        model.search("left0w1")


def test_a_keyed_form_scores_its_training_documents_by_their_own_vectors(tmp_path: Path) -> None:
    """halftrans keeps a free vector per training document: `Document`s with their ids get it, as in the service."""
    docs = make_corpus(60, seed=3, vocab_words=300)
    bundle = make_bundle(tmp_path / "ht", docs, form="halftrans", n_dims=8)
    oracle = Oracle(bundle, docs)
    model = ssi.load(bundle, corpus=docs)
    query = f"{docs[0].title} {docs[1].text[:40]}"
    np.testing.assert_allclose(model.scores([query])[0], oracle.scores(query), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.score([query], docs)[0], oracle.scores(query), rtol=1e-5, atol=1e-6)
    ids, _ = oracle.top(query, 5)
    assert [h.id for h in model.search(query, k=5)] == ids


def test_plain_texts_are_a_corpus_and_k_is_checked(api_world: ApiWorld) -> None:
    model = ssi.load(api_world.trained.bundle, corpus=["left0w1 common3", "right9w1", "common3"])
    hits = model.search("left0w1 common3", k=10)
    assert [h.id for h in hits][0] == "0" and len(hits) == 3  # k beyond the corpus: all of it
    with pytest.raises(ValueError, match="k must be positive"):
        model.search("left0w1", k=0)
    assert model.search([], k=3) == []


def test_a_filtered_search_is_the_brute_force_among_the_matching_documents(api_world: ApiWorld) -> None:
    """`ssi.load` over documents with fields: `search(..., filter=...)` is the exact top k of the reference score
    among the documents the filter matches (the service's filter language, ssi.fields), ties by corpus position."""
    plain = read_corpus(api_world.data.corpus)
    docs = [
        replace(d, fields={"side": ["left", "right"][i % 2], "n": i, **({"tags": ["x"]} if i % 5 == 0 else {})})
        for i, d in enumerate(plain)
    ]
    model = ssi.load(api_world.trained, corpus=docs)
    oracle = Oracle(api_world.trained.bundle, plain)
    assert model.field_types == {"side": "keyword", "n": "integer", "tags": "keyword_list"}
    filters = {
        "term": ({"term": {"side": "left"}}, lambda i: i % 2 == 0),
        "and, range, exists": ({"and": [{"range": {"n": {"gte": 40, "lt": 200}}}, {"exists": "tags"}]},
                               lambda i: 40 <= i < 200 and i % 5 == 0),
        "not, or": ({"not": {"or": [{"term": {"side": "right"}}, {"terms": {"n": [0, 2, 4]}}]}},
                    lambda i: i % 2 == 0 and i not in (0, 2, 4)),
        "a few": ({"range": {"n": {"lte": 3}}}, lambda i: i <= 3),
    }  # fmt: skip
    for name, (node, matches) in filters.items():
        rows = np.asarray([i for i in range(len(docs)) if matches(i)])
        assert model.matching(node) == [docs[i].id for i in rows], name
        for query, hits in zip(QUERIES[:4], model.search(QUERIES[:4], k=10, filter=node), strict=True):
            f = oracle.scores(query)[rows]
            order = np.lexsort((rows, -f))[:10]
            assert [h.id for h in hits] == [docs[rows[i]].id for i in order], (name, query)
            np.testing.assert_allclose([h.score for h in hits], f[order], rtol=1e-5, atol=1e-6)
    assert len(model.search(QUERIES[0], k=10, filter=filters["a few"][0])) == 4  # fewer match: all of them
    with pytest.raises(FieldError, match="unknown field 'colour'"):
        model.search(QUERIES[0], filter={"term": {"colour": "red"}})
    with pytest.raises(FieldError, match="field 'n' has type integer, was given keyword"):
        model.search(QUERIES[0], filter={"term": {"n": "seven"}})
    clash = [docs[0], replace(docs[1], fields={"n": "many"})]
    with pytest.raises(FieldTypeMismatch, match=f"document '{docs[1].id}': field 'n' has type integer, was given"):
        ssi.load(api_world.trained, corpus=clash)
    declared = ssi.load(api_world.trained, corpus=[replace(docs[0], fields={"day": "2024-05-01"})],
                        fields={"day": "keyword"})  # fmt: skip
    assert declared.field_types == {"day": "keyword"} and declared.matching({"term": {"day": "2024-05-01"}})


def test_ranking_and_the_client_need_no_pytorch_and_the_service_still_loads(api_world: ApiWorld) -> None:
    """What a notebook or the service image has: no torch, no onnx. `import ssi.bundle` (the service's
    import) loads none of the API; ssi.load ranks, ssi.Client is built, help(ssi) shows the three jobs."""
    code = f"""
import sys
sys.modules["torch"] = None
sys.modules["onnx"] = None
import ssi.bundle
import service.app
loaded = [name for name in sys.modules if name == "ssi.api" or name.startswith(("ssi.api.", "training"))]
assert not loaded, loaded
import ssi
model = ssi.load({str(api_world.trained.bundle)!r}, corpus={str(api_world.data.corpus)!r})
assert len(model.search("left0w1 common3", k=5)) == 5
ssi.Client("http://127.0.0.1:9").close()
import pydoc
text = pydoc.render_doc(ssi)
assert "ssi.train(" in text and "ssi.load(" in text and "ssi.Client(" in text, text[:2000]
try:
    ssi.train({str(api_world.data.corpus)!r}, {str(api_world.data.train_pairs)!r}, out="never")
except ModuleNotFoundError as exc:
    assert "train extra" in str(exc), exc
else:
    raise AssertionError("trained without torch")
assert "training.run" not in sys.modules and "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
