"""One oracle test per model form: the served top-k over HTTP equals brute force of the form's reference score.

Each form gets random arrays of its declared shapes over a small generated corpus (D of a few
hundred words, so full W stays small), a bundle whose encoder is the trainer's ONNX export of the
form's query map, and a real server with a flat index and a FAISS pool much smaller than the
collection, so the lexical candidates have work to do; each bundle is served once, and its queries go down both
routes of the exact ranking. The brute force is `form.reference_scores`
over every document (ssi.forms: the single definition of f); nothing here computes f by hand.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from service_testing import (
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    polling_client,
    probe_queries,
    write_corpus,
)

from service import model_state
from service.embedding import Embedder
from ssi.bundle import BundleError, load_bundle, write_bundle
from ssi.forms import FORMS, PSI3
from ssi.forms.projection import Projection
from ssi.records import Document
from training.encoder import form_encoder

POOL = 16
K = 10
# PSI-3's degree-3 factors drawn larger than the rest, so the cubic term changes the ranking.
SCALES = {"psi3": {"V3": 0.8, "Y3": 0.8}}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("forms")
    # With fields for the filtered cases (service.fields): never featurized, so every score is what it was.
    docs = [
        replace(d, fields={"parity": "odd" if i % 2 else "even", "bucket": i % 50})
        for i, d in enumerate(make_corpus(300, seed=21, vocab_words=400))
    ]
    return {"root": root, "docs": docs, "corpus": write_corpus(root / "corpus.jsonl", docs)}


# A broad filter (half the documents: the index with them as a selector) and a narrow one (4 %: an exact scan of
# them) with the documents each matches, for the filtered cases of every form (service.fields.plan).
FILTERS = (
    ({"term": {"parity": "even"}}, lambda fields: fields["parity"] == "even"),
    ({"range": {"bucket": {"lt": 2}}}, lambda fields: fields["bucket"] < 2),
)


def cubic_term_matters(bundle_dir: Path, oracle: Oracle, queries: list[str]) -> bool:
    """Whether PSI-3's top-k differs from that of its degree-2 part (the same arrays with V₃ = 0)."""
    form = load_bundle(bundle_dir, mmap=False).form
    quadratic = PSI3({**form.values, "V3": np.zeros_like(form.values["V3"])})
    for query in queries:
        q = oracle.featurize(query)
        full = oracle.form.reference_scores(q, oracle.doc_matrix)[0]
        degree2 = quadratic.reference_scores(q, oracle.doc_matrix)[0]
        if list(np.argsort(-full, kind="stable")[:K]) != list(np.argsort(-degree2, kind="stable")[:K]):
            return True
    return False


SERVED = sorted(name for name, cls in FORMS.items() if cls.served_exactly)


ROUTES = ("every-row", "pool")


@contextmanager
def route(name: str) -> Iterator[None]:
    """One of the two routes of the exact ranking, chosen per search (service.model_state): s and l of every row
    (a flat index and a cheap dense lexical pass: a small collection), or the FAISS pool with the lexical rows
    beyond it (a large one), forced here on a small collection."""
    with pytest.MonkeyPatch.context() as patch:
        if name == "pool":
            patch.setattr(model_state, "prefers_dense", lambda lexical, pool, every_row=False: False)
        yield


@pytest.mark.parametrize(
    ("form", "lexical", "stemmer"),
    [(form, "tfidf", None) for form in SERVED]
    + [(form, "bm25", None) for form in SERVED if form != "cfh"]  # cfh: tf-idf rows
    + [("lowrank", "bm25", "english"), ("diagonal", "bm25", "english"), ("symmetric", "tfidf", "english")],
)
def test_served_top_k_equals_brute_force_of_the_reference_score(
    form: str, lexical: str, stemmer: str | None, corpus: dict, tmp_path: Path
) -> None:
    """Under both lexical weightings: with BM25 a query's row and a document's differ (ssi.weighting), and the
    service must put each text on its side, "more like this" included (a stored document as the query). With
    a stemmer, the service looks every word up by its stem as the trainer did (ssi.stemming). Both routes of the
    exact ranking (`route`), from one server.

    Slow: only the module's first case, which imports torch for the encoders' ONNX export (training.encoder) and
    the service for the rest of the module; each other case takes a few seconds."""
    docs: list[Document] = corpus["docs"]
    bundle = make_bundle(
        tmp_path / "bundle", docs, form=form, n_dims=12, seed=3, scales=SCALES.get(form), lexical=lexical,
        stemmer=stemmer,
    )  # fmt: skip
    oracle = Oracle(bundle, docs)
    assert oracle.bundle.vocab.lexical == lexical and oracle.bundle.vocab.stemmer == stemmer
    assert oracle.form.name == form
    queries = probe_queries(docs, 12, seed=sum(map(ord, form)))
    if form == "psi3":
        assert cubic_term_matters(bundle, oracle, queries)
    plan = dict(filter_exact_docs=0, filter_exact_fraction=0.05)  # the broad filter through the index, the narrow not
    with ThreadServer(
        bundle=bundle, corpus=corpus["corpus"], cache_dir=tmp_path / "cache", scan_pool=POOL, **plan
    ) as server:
        model = server.client.get("/model").json()
        assert model["form"] == form and model["index_dims"] == oracle.form.index_dims
        for name in ROUTES:
            with route(name):
                candidates = []
                for query in queries:
                    response = server.client.post("/search", json={"query": query, "k": K})
                    assert response.status_code == 200, response.text
                    assert_same_ranking(response.json()["hits"], oracle, query, K)
                    candidates.append(response.json()["candidates"])
                if name == "pool" and oracle.form.lexical_weights().any():  # rows beyond the FAISS pool were scored
                    assert max(candidates) > POOL
                for node, keep in FILTERS:  # the top k among the documents a filter matches
                    among = {d.id for d in docs if d.fields and keep(d.fields)}
                    for query in queries[:4]:
                        response = server.client.post("/search", json={"query": query, "k": K, "filter": node})
                        assert response.status_code == 200, response.text
                        assert_same_ranking(response.json()["hits"], oracle, query, K, among=among)
                for doc in docs[:: len(docs) // 8]:
                    response = server.client.get("/documents/" + quote(doc.id, safe="") + "/similar", params={"k": K})
                    assert response.status_code == 200, response.text
                    assert_same_ranking(response.json()["hits"], oracle, doc.full_text, K, exclude=doc.id)


@pytest.mark.parametrize("weight", [0.0, 2.0])
def test_a_projection_alone_or_with_tfidf_is_served_exactly(weight: float, corpus: dict, tmp_path: Path) -> None:
    """The projection form as the fitted kinds export it (paper 003): cos(Aq, Bd) plus one tf-idf weight c for
    every word, 0 (the cosine alone) or c > 0 (combined). The index holds B d/‖B d‖, the encoder A q/‖A q‖,
    and the rerank's bounds (s ∈ [−1, 1], l⁺ ≤ c·q·d) keep the top k exact on both routes."""
    docs: list[Document] = corpus["docs"]
    random = load_bundle(make_bundle(tmp_path / "random", docs, form="projection", n_dims=12, seed=5), mmap=False)
    form = Projection({**random.form.values, "w": np.full_like(random.form.values["w"], weight)})
    bundle = tmp_path / "bundle"
    write_bundle(bundle, form=form, vocab=random.vocab, encoder_onnx=form_encoder(form))
    oracle = Oracle(bundle, docs)
    with ThreadServer(bundle=bundle, corpus=corpus["corpus"], cache_dir=tmp_path / "cache", scan_pool=POOL) as server:
        for name in ROUTES:
            with route(name):
                candidates = []
                for query in probe_queries(docs, 12, seed=7):
                    response = server.client.post("/search", json={"query": query, "k": K})
                    assert response.status_code == 200, response.text
                    assert_same_ranking(response.json()["hits"], oracle, query, K)
                    assert all(-1 - 1e-5 <= hit["semantic"] <= 1 + 1e-5 for hit in response.json()["hits"])  # cosine
                    candidates.append(response.json()["candidates"])
                if name == "pool":  # only word matches bring documents beyond the pool
                    assert (max(candidates) > POOL) == (weight > 0)


class _RerankOnly(FORMS["lowrank"]):  # type: ignore[misc, valid-type]
    """A form whose score is not an inner product plus a diagonal (as a topic model's would be)."""

    name = "rerank-only"
    served_exactly = False


def test_a_form_that_cannot_be_served_exactly_is_refused_at_load(corpus: dict, tmp_path: Path) -> None:
    bundle_dir = make_bundle(tmp_path / "bundle", corpus["docs"], form="lowrank")
    bundle = load_bundle(bundle_dir)
    rerank_only = replace(bundle, form=_RerankOnly(bundle.form.values))
    with pytest.raises(BundleError, match="form 'rerank-only' cannot be ranked from an inner-product index"):
        Embedder(rerank_only, threads=1)


@pytest.mark.parametrize("form", sorted(name for name, cls in FORMS.items() if not cls.served_exactly))
def test_a_bundled_form_not_served_exactly_gets_a_clear_refusal(form: str, corpus: dict, tmp_path: Path) -> None:
    """Hash kernels: the bundle loads (`ssi eval` ranks it); the embedder refuses it, and a server says why."""
    bundle_dir = make_bundle(tmp_path / "bundle", corpus["docs"], form=form)
    bundle = load_bundle(bundle_dir)
    assert bundle.manifest.index_dims == 0
    with pytest.raises(BundleError, match=f"form '{form}' cannot be ranked from an inner-product index"):
        Embedder(bundle, threads=1)
    server = ThreadServer(bundle=bundle_dir, corpus=corpus["corpus"], cache_dir=tmp_path / "cache")
    server.thread.start()
    try:
        deadline = time.monotonic() + 60
        with polling_client(timeout=5) as client:
            while True:
                try:
                    ready = client.get(f"{server.url}/readyz")
                except httpx.TransportError:
                    ready = None
                if ready is not None and ready.json()["status"] != "loading":
                    break
                assert time.monotonic() < deadline, "the server neither failed nor became ready"
                time.sleep(0.1)
        assert ready.status_code == 503 and ready.json()["status"] == "failed"
        (collection,) = ready.json()["collections"].values()
        assert f"form '{form}' cannot be ranked from an inner-product index" in collection["error"]
    finally:
        server.server.should_exit = True
        server.thread.join(timeout=30)
