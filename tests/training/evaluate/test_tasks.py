"""Tasks of the evaluation protocol: filtered document–document, keyword queries, BEIR, splits."""

from __future__ import annotations

import numpy as np
import pytest

from ssi.keywords import keyword_query
from ssi.records import Document, Pair, Query
from ssi.tokenize import tokenize
from training.evaluate.features import TokenTable
from training.evaluate.tasks import TaskError, beir_task, doc_doc_task, keyword_task
from training.splits import split_by_query

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def make_docs(n: int = 6) -> list[Document]:
    rng = np.random.default_rng(1)
    return [Document(f"d{i}", f"Title {i}", " ".join(rng.choice(WORDS, size=40).tolist())) for i in range(n)]


def test_doc_doc_task_filters_the_query_and_its_training_links() -> None:
    docs = make_docs()
    train = [Pair("d0", "d1"), Pair("d0", "d2"), Pair("d3", "d4")]
    valid = [Pair("d0", "d3"), Pair("d0", "d5"), Pair("d4", "d0")]
    task = doc_doc_task(docs, valid, train)

    assert task.query_ids == ("d0", "d4")  # corpus order; d1, d2, d3, d5 have no valid link
    assert task.qrels["d0"] == {"d3", "d5"}
    assert task.excluded["d0"] == {"d0", "d1", "d2"}
    assert task.excluded["d4"] == {"d4"}
    assert task.query_texts[0] == docs[0].full_text
    assert task.stats.queries_without_relevant == 4
    # The index form used by the metrics says the same thing.
    assert task.excluded_matrix[0].indices.tolist() == [0, 1, 2]
    assert task.relevant_matrix[0].indices.tolist() == [3, 5]
    assert task.query_doc_rows.tolist() == [0, 4]


def test_unfiltered_task_still_leaves_out_the_query_itself() -> None:
    task = doc_doc_task(make_docs(), [Pair("d0", "d3")], [Pair("d0", "d1")], filtered=False)
    assert task.excluded["d0"] == {"d0"}


def test_an_eval_link_also_in_training_stays_relevant_and_is_counted() -> None:
    task = doc_doc_task(make_docs(), [Pair("d0", "d1")], [Pair("d0", "d1"), Pair("d0", "d2")])
    assert task.qrels["d0"] == {"d1"}
    assert task.excluded["d0"] == {"d0", "d2"}
    assert task.stats.eval_also_in_train == 1


def test_unknown_ids_and_self_links_are_counted_not_hidden() -> None:
    valid = [Pair("d0", "d1"), Pair("nope", "d1"), Pair("d0", "ghost"), Pair("d2", "d2"), Pair("d0", "d1")]
    train = [Pair("d0", "missing")]
    task = doc_doc_task(make_docs(), valid, train)
    stats = task.stats
    assert (stats.unknown_query_pairs, stats.unknown_doc_pairs, stats.unknown_train_pairs) == (1, 1, 1)
    assert stats.self_pairs == 1 and stats.duplicate_pairs == 1
    assert set(stats.unknown_examples) == {"nope", "ghost", "missing"}
    text = " ".join(stats.problems())
    assert "unknown query id" in text and "unknown document id" in text and "'ghost'" in text


def test_a_task_without_any_judged_query_is_refused_with_the_reason() -> None:
    with pytest.raises(TaskError, match="no query has a relevant document.*2 name unknown ids"):
        doc_doc_task(make_docs(), [Pair("x", "d1"), Pair("d1", "y")])


def test_keyword_queries_are_deterministic_under_the_seed() -> None:
    docs = make_docs()
    valid = [Pair("d0", "d3"), Pair("d1", "d2")]
    first = keyword_task(docs, valid, n_words=5, seed=7)
    again = keyword_task(docs, valid, n_words=5, seed=7)
    other = keyword_task(docs, valid, n_words=5, seed=8)
    assert first.query_texts == again.query_texts
    assert first.query_texts != other.query_texts
    assert first.name == "keywords-5" and first.query_doc_ids is None
    for text, doc in zip(first.query_texts, [docs[0], docs[1]], strict=True):
        words = text.split()
        assert len(words) == 5 and len(set(words)) == 5
        assert set(words) <= set(tokenize(doc.full_text))
    # A query's words depend on its id and the seed only, not on the other queries.
    alone = keyword_task(docs, [Pair("d1", "d2")], n_words=5, seed=7)
    assert alone.query_texts[0] == first.query_texts[1]


def test_keyword_queries_are_the_same_from_a_shared_token_table() -> None:
    docs = make_docs()
    valid = [Pair("d0", "d3"), Pair("d1", "d2")]
    shared = keyword_task(docs, valid, n_words=4, seed=2, tokens=TokenTable())
    assert shared.query_texts == keyword_task(docs, valid, n_words=4, seed=2).query_texts


def test_keyword_query_keeps_short_documents_whole() -> None:
    assert keyword_query("one two two three", 10, 0, "q") == "one two three"


def test_beir_task_skips_unjudged_queries_and_counts_unknown_ids() -> None:
    docs = make_docs(3)
    queries = [Query("q1", "alpha beta"), Query("q2", "gamma"), Query("q3", "never judged")]
    qrels = [Pair("q1", "d0"), Pair("q2", "d1"), Pair("q2", "d2"), Pair("q9", "d0"), Pair("q1", "dx")]
    task = beir_task(docs, queries, qrels, name="sci")
    assert task.query_ids == ("q1", "q2")
    assert task.qrels["q2"] == {"d1", "d2"}
    assert task.excluded == {} and task.excluded_matrix.nnz == 0
    assert task.primary_metric == "ndcg@10"
    assert task.stats.unknown_query_pairs == 1 and task.stats.unknown_doc_pairs == 1
    assert task.stats.queries_without_relevant == 1


def test_beir_task_refuses_repeated_query_ids() -> None:
    with pytest.raises(TaskError, match="appears twice"):
        beir_task(make_docs(2), [Query("q", "a"), Query("q", "b")], [Pair("q", "d0")])


def test_subset_is_a_fixed_sample_of_whole_queries() -> None:
    docs = make_docs(6)
    valid = [Pair(f"d{i}", f"d{(i + 1) % 6}") for i in range(6)]
    task = doc_doc_task(docs, valid)
    sample = task.subset(3, seed=4)
    assert sample.query_ids == task.subset(3, seed=4).query_ids
    assert sample.n_queries == 3 and set(sample.query_ids) <= set(task.query_ids)
    assert all(sample.qrels[q] == task.qrels[q] and sample.excluded[q] == task.excluded[q] for q in sample.query_ids)
    assert task.subset(0) is task and task.subset(99) is task


def test_split_by_query_is_deterministic_disjoint_and_keeps_queries_whole() -> None:
    pairs = [Pair(f"q{i:02d}", f"d{j}") for i in range(30) for j in range(i % 3 + 1)]
    train, valid = split_by_query(pairs, 0.2, seed=3)
    train_q, valid_q = {p.query_id for p in train}, {p.query_id for p in valid}
    assert len(valid_q) == 6 and not train_q & valid_q and train_q | valid_q == {p.query_id for p in pairs}
    assert sorted(train + valid, key=lambda p: (p.query_id, p.doc_id)) == sorted(
        pairs, key=lambda p: (p.query_id, p.doc_id)
    )
    # The split depends on the query ids, not on the order of the file.
    assert split_by_query(list(reversed(pairs)), 0.2, seed=3)[1] == list(reversed(valid))
    assert {p.query_id for p in split_by_query(pairs, 0.2, seed=4)[1]} != valid_q
    with pytest.raises(ValueError):
        split_by_query(pairs, 1.0)
