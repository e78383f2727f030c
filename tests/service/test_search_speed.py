"""What the request path does to go faster stays exact: micro-batched searches and the pruned pool."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
from service_testing import TLS, ThreadServer, assert_same_ranking, probe_queries
from test_service_rerank import brute, query_vector, random_collection, run

from service.batching import QueryBatcher
from service.model_state import QueryResult


def _result(query: str, key: tuple) -> QueryResult:
    return QueryResult([f"{query}/{key[0]}"], [1.0], [1.0], [0.0], query_words=1, candidates=1)


def test_queries_waiting_together_share_one_search_and_each_gets_its_own_result() -> None:
    calls: list[list[str]] = []
    release = threading.Event()

    def search(queries, key):
        calls.append(list(queries))
        if len(calls) == 1:
            release.wait(timeout=30)  # the first batch runs while the others queue up
        return [_result(q, key) for q in queries]

    batcher = QueryBatcher(search, leaders=1, max_batch=32)
    queries = [f"q{i}" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(batcher.search, queries[0], (10, 0, None, None))
        while not calls:
            threading.Event().wait(0.01)
        rest = [pool.submit(batcher.search, q, (10, 0, None, None)) for q in queries[1:]]
        while len(batcher._pending) < 7:
            threading.Event().wait(0.01)
        release.set()
        results = [first.result(), *[f.result() for f in rest]]
    assert [r.doc_ids[0] for r in results] == [f"{q}/10" for q in queries]
    assert calls[0] == ["q0"] and sorted(calls[1]) == sorted(queries[1:])  # one call for the seven waiting
    assert batcher.largest == 7


def test_after_batches_of_many_a_leader_waits_for_the_rest_of_a_batch_and_a_lone_query_does_not_wait() -> None:
    """With gathering on, once batches have held many queries a leader that finds a few waits (up to the
    gather time) until as many wait as usual, and runs them as one batch; a lone client is never held."""
    calls: list[int] = []

    def search(queries, key):
        calls.append(len(queries))
        return [_result(q, key) for q in queries]

    key = (10, 0, None, None)
    lone = QueryBatcher(search, leaders=1, max_batch=32, gather_s=30.0)
    for i in range(5):  # batches of one: never above GATHER_FROM, so the 30 s gather never applies
        assert lone.submit(f"lone{i}", key).result(timeout=5).doc_ids == [f"lone{i}/10"]
    assert calls == [1] * 5
    calls.clear()

    batcher = QueryBatcher(search, leaders=1, max_batch=32, gather_s=30.0)
    batcher._mean = 16.0  # as after a run of batches of 16
    first = [batcher.submit(f"a{i}", key) for i in range(3)]
    threading.Event().wait(0.2)
    assert calls == [] and len(batcher._pending) == 3  # three wait for the usual sixteen: the leader holds them
    rest = [batcher.submit(f"b{i}", key) for i in range(13)]
    results = [f.result(timeout=5) for f in first + rest]
    assert calls == [16] and [r.doc_ids[0] for r in results[:3]] == ["a0/10", "a1/10", "a2/10"]

    quick = QueryBatcher(search, leaders=1, max_batch=32, gather_s=0.05)
    quick._mean = 16.0  # nobody else comes: the leader runs what it has once the gather time is over
    assert quick.submit("alone", key).result(timeout=5).doc_ids == ["alone/10"]


def test_a_batch_only_holds_queries_of_one_key_and_errors_reach_their_own_waiters() -> None:
    def search(queries, key):
        if key[0] == 13:
            raise ValueError("k=13 refused")
        return [_result(q, key) for q in queries]

    batcher = QueryBatcher(search, leaders=2, max_batch=4)
    keys = [(10, 0, None, None), (13, 0, None, None), (20, 0, None, None)]
    with ThreadPoolExecutor(12) as pool:
        futures = [(i, pool.submit(batcher.search, f"q{i}", keys[i % 3])) for i in range(36)]
        for i, future in futures:
            if i % 3 == 1:
                assert isinstance(future.exception(), ValueError)
            else:
                assert future.result().doc_ids == [f"q{i}/{keys[i % 3][0]}"]


def test_pool_rows_the_lexical_bound_rules_out_are_not_scored() -> None:
    """With small diagonal weights, most of the FAISS pool cannot reach the top k: fewer rows scored, same ranking."""
    X, E = random_collection(3, n_docs=1500)
    rng = np.random.default_rng(9)
    for w_scale in (0.0, 0.05, 2.0):
        w = np.full(X.shape[1], w_scale)
        for _ in range(10):
            ids, vals = query_vector(rng, X.shape[1], 5)
            uq = rng.standard_normal(E.shape[1])
            ranked = run(E, X, w, uq, ids, vals, want=10, pool=400)
            f = brute(E, X, w, uq, ids, vals, np.ones(E.shape[0], dtype=bool))
            np.testing.assert_array_equal(ranked.rows, np.lexsort((np.arange(f.shape[0]), -f))[:10])
            if w_scale == 0.0:
                assert ranked.candidates < 400  # the pool itself was cut to what can still win


def test_concurrent_searches_over_http_equal_brute_force(small_world: dict, tmp_path) -> None:
    """32 searches at once (batched together by the server) each return the oracle's exact top k."""
    oracle = small_world["oracle"]
    queries = probe_queries(small_world["docs"], 32, seed=5)
    world = {"bundle": small_world["bundle"], "corpus": small_world["corpus"]}
    with ThreadServer(**world, cache_dir=tmp_path, scan_pool=32) as s:

        def ask(query: str) -> list[dict]:
            with httpx.Client(base_url=s.url, timeout=30, verify=TLS) as client:
                response = client.post("/search", json={"query": query, "k": 10})
                assert response.status_code == 200, response.text
                return response.json()["hits"]

        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(ask, queries))
    for query, hits in zip(queries, answers, strict=True):
        assert_same_ranking(hits, oracle, query, 10)
