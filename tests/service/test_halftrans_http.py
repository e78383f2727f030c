"""Half-transductive ranking over HTTP: a training document is served with its free vector v_d, a document
added or changed through the write API after training with its functional embedding W d (paper 004, eq. 2)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from service_testing import API_KEY, ThreadServer, make_bundle, make_corpus, write_corpus

from ssi.bundle import load_bundle
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}
N_DOCS = 40


def test_training_documents_use_free_vectors_and_later_writes_fall_back_to_w_d(tmp_path: Path) -> None:
    docs = make_corpus(N_DOCS, seed=5, vocab_words=200)
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    bundle_dir = make_bundle(tmp_path / "bundle", docs, form="halftrans", n_dims=8, seed=2)  # docs[::2] trained
    bundle = load_bundle(bundle_dir, mmap=False)
    form, vocab = bundle.form, bundle.vocab
    W, v = np.asarray(form.values["W"], dtype=np.float64), np.asarray(form.values["v"], dtype=np.float64)
    ids = list(form.keys.ids)

    def functional(text: str) -> np.ndarray:
        return W @ vocab.featurize([text]).toarray()[0]

    def free(doc_id: str) -> np.ndarray:
        return v[ids.index(doc_id)]

    query = f"{docs[5].title} {docs[9].title}"
    q = functional(query)  # queries are always embedded functionally: W φ(x)

    with ThreadServer(bundle=bundle_dir, corpus=corpus, cache_dir=tmp_path / "cache", api_key=API_KEY) as server:

        def served(doc_id: str) -> float:
            response = server.client.post("/search", json={"query": query, "k": N_DOCS + 1})
            assert response.status_code == 200, response.text
            (hit,) = [h for h in response.json()["hits"] if h["id"] == doc_id]
            assert hit["lexical"] == 0.0  # eq. (2) has no diagonal term
            return float(hit["score"])

        def put(doc: Document) -> None:
            url = "/documents/" + quote(doc.id, safe="")
            response = server.client.put(url, json={"title": doc.title, "text": doc.text}, headers=KEY)
            assert response.status_code == 200, response.text

        trained, untrained = docs[10], docs[11]
        assert trained.id in ids and untrained.id not in ids
        # A training document: its free vector, not its functional embedding.
        assert served(trained.id) == pytest.approx(q @ free(trained.id), abs=1e-4)
        assert abs(q @ free(trained.id) - q @ functional(trained.full_text)) > 1e-2
        # A corpus document the model holds no vector for: W d.
        assert served(untrained.id) == pytest.approx(q @ functional(untrained.full_text), abs=1e-4)

        # Added through the write API after training: W d.
        new = Document("added-later", "Fresh arrival", f"{docs[3].text} {docs[7].text}")
        put(new)
        assert served(new.id) == pytest.approx(q @ functional(new.full_text), abs=1e-4)

        # A training document whose text changed: no longer the document its vector was learned for.
        changed = Document(trained.id, "Rewritten", docs[13].text)
        put(changed)
        assert served(trained.id) == pytest.approx(q @ functional(changed.full_text), abs=1e-4)
        # Its training text back: the free vector again.
        put(trained)
        assert served(trained.id) == pytest.approx(q @ free(trained.id), abs=1e-4)
