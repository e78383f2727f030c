"""Metrics against a hand-computed ranking, against each metric's definition, and against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from ssi.records import Document, Pair
from training.evaluate.harness import EvalTable, ScorerResult
from training.evaluate.metrics import (
    MAP,
    NDCG10,
    P10,
    RANK_LOSS,
    block_metrics,
    quick_map,
    quick_metrics,
    summarize,
)
from training.evaluate.tasks import doc_doc_task


def csr(rows: list[list[int]], n_docs: int) -> sp.csr_matrix:
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.asarray([c for r in rows for c in sorted(r)], dtype=np.int64)
    return sp.csr_matrix((np.ones(indices.shape[0], dtype=bool), indices, indptr), shape=(len(rows), n_docs))


def hand_example() -> tuple[np.ndarray, sp.csr_matrix, sp.csr_matrix]:
    """12 documents scored 1 − j/20; relevant {1, 4}; documents 0 and 2 excluded.

    Candidates in order: 1, 3, 4, 5, …, 11, so the relevant ranks are 1 and 3.
    """
    scores = (1.0 - np.arange(12) / 20.0)[None, :].astype(np.float32)
    return scores, csr([[1, 4]], 12), csr([[0, 2]], 12)


def test_metrics_match_a_hand_computed_ranking() -> None:
    """The four metrics of one ranking worked out by hand."""
    scores, relevant, excluded = hand_example()
    expected = {
        MAP: (1 / 1 + 2 / 3) / 2,
        P10: 2 / 10,
        NDCG10: (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)),
        RANK_LOSS: 1 / (2 * 8),  # document 3 above document 4; 8 non-relevant candidates
    }
    for values in (block_metrics(scores, relevant, excluded), quick_metrics(scores, relevant, excluded)):
        for metric, value in expected.items():
            assert values[metric][0] == pytest.approx(value, abs=1e-12), metric


def test_excluded_documents_are_out_of_the_ranking_not_just_lower() -> None:
    scores, relevant, _ = hand_example()
    unfiltered = quick_metrics(scores, relevant, csr([[]], 12))
    assert unfiltered[MAP][0] == pytest.approx((1 / 2 + 2 / 5) / 2)  # ranks 2 and 5 with 0 and 2 present


def test_ties_break_by_corpus_position_and_count_half_in_rank_loss() -> None:
    scores = np.full((1, 4), 0.5, dtype=np.float32)
    values = block_metrics(scores, csr([[2]], 4), csr([[]], 4))
    assert values[MAP][0] == pytest.approx(1 / 3)  # tied documents 0 and 1 come first
    assert values[RANK_LOSS][0] == pytest.approx(0.5)
    assert quick_metrics(scores, csr([[2]], 4), csr([[]], 4))[MAP][0] == pytest.approx(1 / 3)


def random_case(seed: int, n_queries: int = 25, n_docs: int = 60, ties: bool = True):
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((n_queries, n_docs)).astype(np.float32)
    if ties:
        scores = np.round(scores, 1)
    relevant, excluded = [], []
    for _ in range(n_queries):
        picked = rng.permutation(n_docs)
        n_rel = int(rng.integers(1, 6))
        n_exc = int(rng.integers(0, 8))
        relevant.append(picked[:n_rel].tolist())
        excluded.append(picked[n_rel : n_rel + n_exc].tolist())
    return scores, csr(relevant, n_docs), csr(excluded, n_docs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_path_equals_the_ranx_path(seed: int) -> None:
    scores, relevant, excluded = random_case(seed)
    fast, reference = quick_metrics(scores, relevant, excluded), block_metrics(scores, relevant, excluded)
    for metric in (MAP, P10, NDCG10, RANK_LOSS):
        np.testing.assert_allclose(fast[metric], reference[metric], atol=1e-12, err_msg=metric)


def test_the_ranx_path_equals_each_metrics_definition_query_by_query() -> None:
    """The oracle: each metric from its textbook definition over the filtered ranking, in plain Python (no ties,
    so the order is unambiguous). It replaces a comparison with ranx's dict API (Qrels, Run), which builds numba
    typed containers that compile in every process, cache or not: half a minute of a test run for three sums."""
    scores, relevant, excluded = random_case(5, ties=False)
    ours = block_metrics(scores, relevant, excluded)
    for q in range(scores.shape[0]):
        left_out = set(excluded[q].indices.tolist())
        ranking = sorted((d for d in range(scores.shape[1]) if d not in left_out), key=lambda d: -scores[q, d])
        rel = set(relevant[q].indices.tolist())
        hits = [d in rel for d in ranking]
        precisions = [sum(hits[: i + 1]) / (i + 1) for i, hit in enumerate(hits) if hit]
        dcg = sum(1 / math.log2(i + 2) for i, hit in enumerate(hits[:10]) if hit)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(rel), 10)))
        assert ours[MAP][q] == pytest.approx(sum(precisions) / len(rel), abs=1e-12)
        assert ours[P10][q] == pytest.approx(sum(hits[:10]) / min(10, len(ranking)), abs=1e-12)
        assert ours[NDCG10][q] == pytest.approx(dcg / ideal, abs=1e-12)


def test_rank_loss_equals_a_brute_force_count_of_pairs() -> None:
    scores, relevant, excluded = random_case(7)
    got = quick_metrics(scores, relevant, excluded)[RANK_LOSS]
    for q in range(scores.shape[0]):
        rel = set(relevant[q].indices.tolist())
        cand = [d for d in range(scores.shape[1]) if d not in set(excluded[q].indices.tolist())]
        wrong, pairs = 0.0, 0
        for r in rel:
            for n in (d for d in cand if d not in rel):
                pairs += 1
                wrong += 1.0 if scores[q, n] > scores[q, r] else 0.5 if scores[q, n] == scores[q, r] else 0.0
        assert got[q] == pytest.approx(wrong / pairs, abs=1e-12)


def test_quick_map_on_a_task_equals_the_ranx_mean() -> None:
    docs = [Document(f"d{i}", "", f"text {i}") for i in range(30)]
    rng = np.random.default_rng(3)
    valid = [Pair(f"d{i}", f"d{j}") for i in range(10) for j in rng.choice(30, 3, replace=False) if i != j]
    train = [Pair(f"d{i}", f"d{(i + 1) % 30}") for i in range(30)]
    task = doc_doc_task(docs, valid, train)
    scores = rng.standard_normal((task.n_queries, task.n_docs)).astype(np.float32)
    reference = block_metrics(scores, task.relevant_matrix, task.excluded_matrix)[MAP].mean()
    assert quick_map(task, scores) == pytest.approx(reference, abs=1e-12)


def test_a_relevant_document_that_is_also_excluded_is_an_error() -> None:
    scores, relevant, _ = hand_example()
    with pytest.raises(ValueError, match="also excluded"):
        quick_metrics(scores, relevant, csr([[1]], 12))


def test_non_finite_scores_are_refused() -> None:
    scores, relevant, excluded = hand_example()
    scores[0, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        block_metrics(scores, relevant, excluded)


def test_summary_is_mean_and_standard_error() -> None:
    s = summarize(np.array([0.0, 1.0, 2.0, 3.0]))
    assert s.mean == pytest.approx(1.5)
    assert s.stderr == pytest.approx(np.std([0, 1, 2, 3], ddof=1) / 2)
    assert summarize(np.array([0.7])).stderr == 0.0


def test_the_paired_difference_reads_the_same_queries_side_by_side() -> None:
    """Two rankers that agree on most queries: their gap's error is the per-query differences', far below
    either row's own (what says whether a model beats BM25 on these queries)."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 400)
    better = np.clip(base + rng.normal(0.02, 0.01, 400), 0, 1)
    table = EvalTable(
        task={"primary_metric": "ndcg@10"},
        query_ids=tuple(str(i) for i in range(400)),
        results={
            name: ScorerResult(name, {"ndcg@10": values}, {"ndcg@10": summarize(values)})
            for name, values in (("model", better), ("bm25", base))
        },
    )
    paired = table.paired_difference("model")
    assert paired is not None and table.paired_difference("bm25") is None
    assert paired.mean == pytest.approx(better.mean() - base.mean())
    assert paired.stderr == pytest.approx((better - base).std(ddof=1) / math.sqrt(400))
    assert paired.stderr < summarize(better).stderr / 5
