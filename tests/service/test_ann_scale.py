"""benchmarks.ann_scale: its passage windows, its recall measures, and a whole run at a tiny size."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.ann_scale import main, overlap, recall, window_passages, window_starts, window_stride


def test_windows_cover_the_text_and_end_at_its_end() -> None:
    assert window_starts(0, 60, 14) == []
    assert window_starts(25, 60, 14) == [0]
    assert window_starts(60, 60, 14) == [0]
    starts = window_starts(100, 60, 14)
    assert starts == [0, 14, 28, 40]  # the last window is moved back to end at word 100
    assert window_starts(120, 60, 60) == [0, 60]  # disjoint when the stride is the width


def test_stride_gives_about_the_wanted_number_of_windows() -> None:
    lengths = [1000, 2000, 300, 50]
    for wanted in (20, 100, 400):
        stride = window_stride(sum(lengths), len(lengths), 60, wanted)
        made = sum(len(window_starts(n, 60, stride)) for n in lengths)
        assert made >= wanted * 0.9
    assert window_stride(sum(lengths), len(lengths), 60, 10) == 60  # few wanted: disjoint windows
    assert window_stride(sum(lengths), len(lengths), 60, 10**6) == 1


def test_window_passages_writes_overlapping_passages(tmp_path: Path) -> None:
    source = tmp_path / "docs.jsonl"
    words = [f"w{i}" for i in range(200)]
    source.write_text(json.dumps({"id": "a", "title": "A", "text": " ".join(words)}) + "\n", encoding="utf-8")
    path, stride = window_passages(source, tmp_path / "passages.jsonl", wanted=10, width=60)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert stride < 60 and 1 < len(rows) <= 10
    assert rows[0]["text"].split() == words[:60]
    assert rows[1]["text"].split() == words[stride : stride + 60]
    assert [row["id"] for row in rows[:2]] == ["a#0", "a#1"]


def test_recall_counts_ties_with_the_kth_score() -> None:
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.5, 0.0], [0.0, 1.0]], dtype=np.float32)
    queries = np.array([[1.0, 0.0]], dtype=np.float32)
    truth = np.array([[0, 1]])
    assert recall(np.array([[1, 0]]), truth, vectors, queries) == 1.0
    assert recall(np.array([[0, 2]]), truth, vectors, queries) == 0.5
    assert recall(np.array([[3, -1]]), truth, vectors, queries) == 0.0
    # a duplicate of the exact 2nd row (same score) counts as found
    vectors[2] = vectors[1]
    assert recall(np.array([[0, 2]]), truth, vectors, queries) == 1.0


def test_overlap_against_exact_rows_and_scores() -> None:
    exact, exact_scores = [np.array([5, 6])], [np.array([2.0, 1.0])]
    assert overlap([np.array([6, 5])], exact, [np.array([2.0, 1.0])], exact_scores) == 1.0
    assert overlap([np.array([5, 9])], exact, [np.array([2.0, 0.5])], exact_scores) == 0.5
    assert overlap([np.array([5, 9])], exact, [np.array([2.0, 1.0])], exact_scores) == 1.0  # 9 ties with 6


@pytest.mark.parametrize("corpus", ["generated", "passages"])
def test_a_tiny_run_is_exact_where_its_knobs_make_the_search_exhaustive(
    small_world: dict, tmp_path: Path, corpus: str
) -> None:
    """IVF probing every list and HNSW with efSearch above the collection size find the exact top 10."""
    out = tmp_path / "ann.json"
    main(
        [
            "--bundle", str(small_world["bundle"]), "--corpus", corpus, "--source", str(small_world["corpus"]),
            "--words", "20", "--documents", "300", "--queries", "8", "--cache-dir", str(tmp_path / "cache"),
            "--indexes", "ivf:4,ivfhnsw:4,hnsw-ip:8,hnsw-l2:8", "--nprobe", "4", "--ef-search", "400",
            "--ef-construction", "64", "--threads", "1", "--out", str(out),
        ]
    )  # fmt: skip
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["documents"] == 300
    assert (report["stride"] is None) == (corpus == "generated")
    for spec, entry in report["indexes"].items():
        assert entry["serialized_over_floor"] >= 1.0, spec
        (measured,) = entry["knobs"].values()
        assert measured["semantic_recall@10"] == 1.0, spec
        assert measured["service_recall@10"] == 1.0, spec
    # the second run reads the cached embeddings instead of recomputing them
    assert (tmp_path / "cache" / f"{corpus}-300" / "vectors.npy").is_file()
