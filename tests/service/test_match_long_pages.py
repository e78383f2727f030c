"""POST /match with web pages of 1,000+ distinct words, against brute force of the form's reference score.

A page is a long query: every advert shares some of its words, so the lexical part's posting lists cover
most of the collection and the exact rerank takes its dense pass (service.rerank LONG_QUERY_LOOKUPS), not
the pruned one of short queries. The served top k must still be the brute-force top k, for both lexical
weightings, for a batch of pages searched together, and through a selective filter that makes a page ask
again for more adverts.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from service_testing import Oracle, ThreadServer, assert_same_ranking, make_bundle, syllable_words, write_corpus

import service.routes.match as match_routes
from service.matching import EXPLAIN_WORDS
from service.settings import CollectionSpec
from ssi.records import Document

VOCAB = 3000
ADS = 1500
PAGE_WORDS = 1200  # distinct words a page holds, below SSI_MAX_PAGE_WORDS (2,048): no word is cut


@pytest.fixture(scope="module")
def long_world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("long-pages")
    rng = np.random.default_rng(11)
    words = syllable_words(VOCAB, rng)
    zipf = 1.0 / np.arange(1, VOCAB + 1) ** 1.05
    zipf /= zipf.sum()
    ads = [
        Document(f"ad-{i:05d}", "", " ".join(rng.choice(words, size=int(rng.integers(6, 30)), p=zipf)))
        for i in range(ADS)
    ]
    pages = []
    for _ in range(4):  # every page: PAGE_WORDS distinct words, the frequent ones repeated as in real text
        distinct = rng.choice(VOCAB, size=PAGE_WORDS, replace=False, p=zipf)
        repeats = rng.choice(distinct, size=2 * PAGE_WORDS)
        pages.append(" ".join(words[i] for i in np.concatenate([distinct, repeats])))
    with (root / "ads.jsonl").open("w", encoding="utf-8") as handle:
        for i, ad in enumerate(ads):
            handle.write(json.dumps({"id": ad.id, "title": "", "text": ad.text, "category": f"c{i % 25}"}) + "\n")
    return {
        "root": root,
        "ads": ads,
        "pages": pages,
        "ads_corpus": root / "ads.jsonl",
        "docs_corpus": write_corpus(root / "docs.jsonl", [Document("page-0", "", pages[0])]),
    }


@pytest.mark.parametrize("lexical", ["bm25", "tfidf"])
def test_long_pages_get_the_brute_force_top_k(long_world: dict, lexical: str, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "bundle", long_world["ads"], n_dims=16, seed=5, lexical=lexical)
    oracle = Oracle(bundle, long_world["ads"])
    pages: list[str] = long_world["pages"]
    assert all(oracle.featurize(page).nnz >= 1000 for page in pages)
    spec = CollectionSpec(bundle=bundle, corpus=long_world["ads_corpus"], type="adverts")
    with ThreadServer(
        bundle=bundle, corpus=long_world["docs_corpus"], cache_dir=tmp_path / "cache", collections={"ads": spec}
    ) as server:
        batch = server.client.post("/match", json={"pages": pages, "k": 10})
        assert batch.status_code == 200, batch.text
        for page, result in zip(pages, batch.json()["results"], strict=True):
            assert result["page_words"] >= 1000
            assert_same_ranking(result["ads"], oracle, page, 10)
            assert_explained_from_the_texts(result["ads"], oracle, page, {ad.id: ad for ad in long_world["ads"]})
            # Alone, the same answer as in the batch.
            alone = server.client.post("/match", json={"page": page, "k": 10}).json()["results"][0]
            assert [ad["id"] for ad in alone["ads"]] == [ad["id"] for ad in result["ads"]]
        # One category in 25: the first 10 adverts hold about none of it, so the page asks again for more.
        f = oracle.scores(pages[1])
        admitted = [i for i in np.lexsort((np.arange(f.shape[0]), -f)).tolist() if i % 25 == 7][:10]
        filtered = server.client.post("/match", json={"page": pages[1], "k": 10, "filters": {"category": ["c7"]}})
        assert filtered.status_code == 200, filtered.text
        (result,) = filtered.json()["results"]
        assert [ad["id"] for ad in result["ads"]] == [oracle.ids[i] for i in admitted]


def assert_explained_from_the_texts(ads: list[dict], oracle: Oracle, page: str, by_id: dict[str, Document]) -> None:
    """Each advert's shared and related words as its own text gives them (the server reads them from its
    indexes): shared by q_i d_i over the words of both, related by q_i (A e_i)·e(d), five each, strongest first
    (ties: the later word id first)."""
    vocab, form = oracle.bundle.vocab, oracle.form
    q = oracle.featurize(page)
    q_ids, q_vals = q.indices.astype(np.int64), q.data.astype(np.float64)
    page_value = dict(zip(q_ids.tolist(), q_vals.tolist(), strict=True))
    for ad in ads:
        d = vocab.featurize_documents([by_id[ad["id"]].full_text])
        shares = sorted(
            ((page_value[i] * float(v), i) for i, v in zip(d.indices.tolist(), d.data.tolist(), strict=True)
             if i in page_value),
            reverse=True,
        )  # fmt: skip
        assert ad["shared_words"] == [vocab.feature_name(i) for _, i in shares[:EXPLAIN_WORDS]]
        embedded = form.embed_documents_of(vocab.doc_matrix(d, ids=[ad["id"]]).S, [ad["id"]]).astype(np.float32)[0]
        contribution = (embedded @ np.asarray(form.query_map()[:, q_ids], dtype=np.float32)) * q_vals
        order = np.argsort(-contribution)[:EXPLAIN_WORDS]
        related = [vocab.feature_name(int(q_ids[j])) for j in order.tolist() if contribution[j] > 0]
        assert ad["related_words"] == related


def test_pages_matched_at_the_same_time_share_batches_and_get_their_own_answers(
    long_world: dict, tmp_path: Path
) -> None:
    """Concurrent /match requests are matched in batches (service.routes.match: one ONNX call and one index
    scan for the pages waiting together, only pages of the same k and filters together); every request gets
    exactly the answer it gets alone, whatever it was batched with."""
    bundle = make_bundle(tmp_path / "bundle", long_world["ads"], n_dims=16, seed=6, lexical="bm25")
    spec = CollectionSpec(bundle=bundle, corpus=long_world["ads_corpus"], type="adverts")
    pages: list[str] = long_world["pages"]
    requests = [
        {"page": page, "k": k, **({"filters": {"category": [f"c{k}"]}} if filtered else {})}
        for page in pages
        for k in (5, 10)
        for filtered in (False, True)
    ]
    with ThreadServer(
        bundle=bundle, corpus=long_world["docs_corpus"], cache_dir=tmp_path / "cache", collections={"ads": spec}
    ) as server:
        alone = [server.client.post("/match", json=body).json()["results"][0]["ads"] for body in requests]
        for _ in range(5):  # until some batch held two pages or more (every round checks the answers)
            with ThreadPoolExecutor(len(requests)) as pool:
                together = list(pool.map(lambda body: server.client.post("/match", json=body), requests * 2))
            assert all(response.status_code == 200 for response in together)
            for body, expected, response in zip(requests * 2, alone * 2, together, strict=True):
                assert response.json()["results"][0]["ads"] == expected, body["k"]
            if max(batcher.largest for batcher in match_routes._batchers.values()) >= 2:
                break
        else:
            pytest.fail("48 concurrent requests were never batched")


def test_an_adverts_collection_is_ready_for_pages_before_its_first_match(long_world: dict, tmp_path: Path) -> None:
    """An adverts collection builds its page featurizer as it loads, not inside the first /match: that first match
    used to hold every page sent behind it (then also for as long as the metadata book, now the adverts' fields,
    took to open: 1.4 s for 100k adverts), in each worker (docs/performance/search.md)."""
    bundle = make_bundle(tmp_path / "bundle", long_world["ads"], n_dims=16, seed=7, lexical="bm25")
    spec = CollectionSpec(bundle=bundle, corpus=long_world["ads_corpus"], type="adverts")
    with ThreadServer(
        bundle=bundle, corpus=long_world["docs_corpus"], cache_dir=tmp_path / "cache", collections={"ads": spec}
    ) as server:
        catalog = server.app.state.catalog
        catalog.wait_loaded()  # what a worker of `ssi serve` waits for before it listens (service.workers)
        embedder = catalog.get("ads").ready_state().embedder
        assert "_bulk" in vars(embedder), "the page featurizer is built at load (a cached property: set once made)"
        assert "_bulk" not in vars(catalog.get(None).ready_state().embedder), "a documents collection never needs it"
        response = server.client.post("/match", json={"page": long_world["pages"][0], "k": 3})
        assert response.status_code == 200 and len(response.json()["results"][0]["ads"]) == 3
