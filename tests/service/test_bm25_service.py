"""A BM25 bundle served (ssi.weighting): /model says which weighting and its average length, and a document
written later is weighted against the bundle's average length, fixed at training, so no stored row moves and
the served ranking stays the brute force of the form's reference score over the grown collection."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import numpy as np
from service_testing import API_KEY, Oracle, ThreadServer, assert_same_ranking, make_bundle, needle_of, probe_queries

from service.bulk_featurize import BulkFeaturizer
from service.embedding import BULK_QUERY_CHARS, Embedder
from ssi.bundle import load_bundle
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}
POOL = 16


def test_a_written_document_keeps_the_bundles_average_length(small_world: dict, tmp_path: Path) -> None:
    docs: list[Document] = list(small_world["docs"])
    bundle = make_bundle(tmp_path / "bundle", docs, n_dims=16, seed=4, lexical="bm25")
    vocab = load_bundle(bundle).vocab
    assert vocab.bm25 is not None
    before = vocab.featurize_documents([d.full_text for d in docs])
    with ThreadServer(
        bundle=bundle, corpus=small_world["corpus"], cache_dir=tmp_path / "cache", api_key=API_KEY, scan_pool=POOL
    ) as server:
        model = server.client.get("/model").json()
        assert model["lexical"] == {
            "scheme": "bm25",
            "k1": vocab.bm25.k1,
            "b": vocab.bm25.b,
            "avg_len": vocab.bm25.avg_len,
        }
        # A long document, many times the average length: were the average tracked, it would move every row.
        a, b = docs[10], docs[11]
        long_text = " ".join([needle_of(a), needle_of(b)] + [d.text for d in docs[20:60]])
        new = Document("long-one", "A long arrival", long_text)
        response = server.client.put(
            "/documents/" + quote(new.id, safe=""), json={"title": new.title, "text": new.text}, headers=KEY
        )
        assert response.status_code == 200, response.text
        grown = [*docs, new]
        oracle = Oracle(bundle, grown)
        assert oracle.bundle.vocab.bm25 == vocab.bm25  # the same fixed average
        assert (oracle.doc_matrix.X[: len(docs)] != before).nnz == 0  # no stored row moved
        for query in [f"{needle_of(a)} {needle_of(b)}", *probe_queries(docs, 6, seed=2)]:
            response = server.client.post("/search", json={"query": query, "k": 10})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], oracle, query, 10)
        assert server.client.get("/model").json()["lexical"]["avg_len"] == vocab.bm25.avg_len


def test_an_index_build_featurizes_bm25_rows_byte_for_byte(small_world: dict, tmp_path: Path) -> None:
    """The array featurizer of index builds (service.bulk_featurize) gives the vocabulary's document rows."""
    docs: list[Document] = small_world["docs"]
    inflected = "Claims claimed; running runners ran, accelerating acceleratingly extraordinarilyness Ünïcödéd"
    texts = [d.full_text for d in docs] + ["", "words nobody knows", "Ünïcödé  and    spaces\tand_underscores"]
    for stemmer in (None, "english"):  # with a stemmer each distinct word is looked up by its stem
        vocab = load_bundle(make_bundle(tmp_path / str(stemmer), docs + [Document("x", "", inflected)],
                                        lexical="bm25", stemmer=stemmer)).vocab  # fmt: skip
        bulk = BulkFeaturizer(vocab)
        assert bulk.uses_arrays
        for batch in (texts, [inflected, *texts, inflected.upper()]):
            for documents in (True, False):  # a document's rows, or a query's (a web page to /match)
                got = bulk.featurize(batch, documents=documents)
                expected = vocab.featurize_documents(batch) if documents else vocab.featurize_queries(batch)
                assert np.array_equal(got.indptr, expected.indptr) and np.array_equal(got.indices, expected.indices)
                assert got.data.tobytes() == expected.data.tobytes()
        page = " ".join(texts)  # a long page takes the array path in the service's query featurizing
        assert len(page) >= BULK_QUERY_CHARS
        embedder = Embedder(load_bundle(tmp_path / str(stemmer)), threads=1)
        got, expected = embedder.featurize_queries([page]), vocab.featurize_queries([page])
        assert np.array_equal(got.indices, expected.indices) and got.data.tobytes() == expected.data.tobytes()


def test_a_stemmed_bundle_finds_a_word_by_any_of_its_forms(small_world: dict, tmp_path: Path) -> None:
    """A bundle whose words are stems (ssi.stemming): a query in one inflection finds a document written later
    in another, as the trainer's vocabulary counted them; /model says which stemmer; the ranking stays exact."""
    docs: list[Document] = list(small_world["docs"])
    bundle = make_bundle(tmp_path / "bundle", docs, n_dims=16, seed=4, lexical="bm25", stemmer="english")
    with ThreadServer(
        bundle=bundle, corpus=small_world["corpus"], cache_dir=tmp_path / "cache", api_key=API_KEY, scan_pool=POOL
    ) as server:
        model = server.client.get("/model").json()
        assert model["stemmer"] == "english" and model["tokenizer"].endswith("+snowball-english")
        word = needle_of(docs[3])  # a word of one document, so the lexical part decides
        new = Document("inflected", "Inflections", f"{word}s were {word}ing; the {word}ed ones {word}ingly")
        response = server.client.put(
            "/documents/" + quote(new.id, safe=""), json={"title": new.title, "text": new.text}, headers=KEY
        )
        assert response.status_code == 200, response.text
        oracle = Oracle(bundle, [*docs, new])
        for query in [f"{word}ing", f"{word}s", f"the {word}ed"]:
            response = server.client.post("/search", json={"query": query, "k": 10})
            assert response.status_code == 200, response.text
            hits = response.json()["hits"]
            matched = {hit["id"] for hit in hits if hit["lexical"] > 0}  # no surface word is shared with both
            assert {docs[3].id, new.id} <= matched, (query, hits)
            assert_same_ranking(hits, oracle, query, 10)
