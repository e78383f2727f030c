"""The demo collection (training/demo_corpus.py): deterministic, consistent, and built so that meaning
and words part ways — the property that lets a learned ranking beat tf-idf on it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ssi.corpus import read_corpus, read_pairs, read_qrels, read_queries_tsv
from ssi.tokenize import tokenize
from training.demo_corpus import TOPICS, DemoConfig, generate, write

FILES = ("corpus.jsonl", "train_pairs.tsv", "valid_pairs.tsv", "queries.tsv", "qrels.tsv")


def run_generator(out: Path, *args: str, hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run(
        [sys.executable, "-m", "training.demo_corpus", "--out", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_same_seed_gives_identical_files_under_any_hash_seed(tmp_path: Path) -> None:
    # Different PYTHONHASHSEEDs catch any dependence on set or dict-of-str iteration order.
    run_generator(tmp_path / "a", "--seed", "7", "--topics", "5", hash_seed="1")
    run_generator(tmp_path / "b", "--seed", "7", "--topics", "5", hash_seed="2")
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_another_seed_gives_another_collection(tmp_path: Path) -> None:
    run_generator(tmp_path / "a", "--seed", "7", "--topics", "5")
    run_generator(tmp_path / "b", "--seed", "8", "--topics", "5")
    assert (tmp_path / "a" / "corpus.jsonl").read_bytes() != (tmp_path / "b" / "corpus.jsonl").read_bytes()
    assert (tmp_path / "a" / "train_pairs.tsv").read_bytes() != (tmp_path / "b" / "train_pairs.tsv").read_bytes()


def test_default_files_are_readable_by_the_trainers_readers_and_consistent(tmp_path: Path) -> None:
    paths = write(generate(), tmp_path)
    docs = read_corpus(paths["corpus"])  # also rejects duplicate ids
    ids = {d.id for d in docs}
    assert len(docs) == len(TOPICS) * 3 * DemoConfig().docs_per_subtopic
    assert all(d.title and len(tokenize(d.text)) >= 20 for d in docs)

    train = read_pairs(paths["train_pairs"])
    valid = read_pairs(paths["valid_pairs"])
    assert len(train) > 2000 and len(valid) > 200
    for pair in train + valid:
        assert pair.query_id in ids and pair.doc_id in ids, pair
        assert pair.query_id != pair.doc_id, pair
    assert not {(p.query_id, p.doc_id) for p in train} & {(p.query_id, p.doc_id) for p in valid}

    queries = read_queries_tsv(paths["queries"])
    qrels = read_qrels(paths["qrels"])
    assert {q.id for q in queries} == {p.query_id for p in qrels}
    assert all(p.doc_id in ids for p in qrels)


def test_related_documents_share_concepts_more_than_words() -> None:
    """Linked documents talk about the same concepts, yet often with different words: the gap SSI closes."""
    concept_of: dict[str, set[int]] = {}
    concept_ids = 0
    topic_words: set[str] = set()
    for subtopics in TOPICS.values():
        for groups in subtopics.values():
            for group in groups:
                for word in group.split("|"):
                    concept_of.setdefault(word, set()).add(concept_ids)
                    topic_words.add(word)
                concept_ids += 1

    collection = generate()
    words = {d.id: set(tokenize(f"{d.title} {d.text}")) & topic_words for d in collection.docs}
    topic = {d.id: d.topic for d in collection.docs}

    def concepts(doc_id: str) -> set[int]:
        return set().union(*(concept_of[w] for w in words[doc_id]))

    shared_concepts = Counter()
    few_shared_words = 0
    for query, doc in collection.train_pairs:
        assert topic[query] == topic[doc]
        shared_concepts[len(concepts(query) & concepts(doc)) >= 3] += 1
        few_shared_words += len(words[query] & words[doc]) <= 2
    pairs = len(collection.train_pairs)
    assert shared_concepts[True] / pairs > 0.9, "linked documents should dwell on the same concepts"
    assert few_shared_words / pairs > 0.4, "many linked documents should use different words for them"


def test_ambiguous_words_cross_topics() -> None:
    """Some words belong to two topics, so a shared word is not proof of relatedness either."""
    seen: dict[str, set[str]] = {}
    for topic, subtopics in TOPICS.items():
        for groups in subtopics.values():
            for group in groups:
                for word in group.split("|"):
                    seen.setdefault(word, set()).add(topic)
    assert sum(len(t) > 1 for t in seen.values()) >= 15
    assert all(len(set(group.split("|"))) == 3 for s in TOPICS.values() for g in s.values() for group in g)


def test_help_explains_every_option() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "training.demo_corpus", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    for option in (
        "--out",
        "--seed",
        "--topics",
        "--docs-per-subtopic",
        "--thread-size",
        "--links-within",
        "--links-across",
        "--valid-fraction",
    ):
        assert option in result.stdout


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="topics"):
        generate(DemoConfig(topics=0))
    with pytest.raises(ValueError, match="at least 2"):
        generate(DemoConfig(docs_per_subtopic=1))
