"""Streamed pairs (`ssi train --stream-pairs`): the run learns, and the pairs held never exceed the buffer."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import read_pairs
from ssi_cli.main import build_app
from tests.training.synonyms import SynonymCorpus, held_out_map, train
from training.data import index_pairs, load_training_data
from training.pair_stream import PairStream, ShuffleBuffer

BUFFER = 64


def test_streamed_training_learns_synonyms(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    summary = train(
        synonyms, tmp_path / "b", "--stream-pairs", "--shuffle-buffer", str(BUFFER),
        "--epochs", "40", "--dims", "16", "--lr", "0.1",
    )  # fmt: skip
    ssi_map, tfidf_map = held_out_map(synonyms, tmp_path / "b")
    assert tfidf_map < 0.1
    assert ssi_map > 0.8 and ssi_map > 8 * tfidf_map
    assert summary["valid"]["map"] == pytest.approx(ssi_map, abs=1e-6)  # validation unchanged: the harness agrees
    stream = summary["stream"]
    assert stream["pairs_held_peak"] <= BUFFER and stream["passes"] >= 40  # every epoch re-read the file
    data = load_bundle(tmp_path / "b").manifest.data
    assert data["train_pairs"] == len(read_pairs(synonyms.train_pairs)) and data["stream"]["shuffle_buffer"] == BUFFER


def _pairs_file(path: Path, n_docs: int, seed: int) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """A gzipped pairs file sorted by query, runs of 1 to 60 pairs (some longer than a 40-pair buffer takes whole)."""
    rng = np.random.default_rng(seed)
    rows = {f"d{i}": i for i in range(n_docs)}
    lines = []
    for q in range(n_docs):
        targets = rng.choice(n_docs, size=min(int(rng.integers(1, 61)), n_docs), replace=False)
        lines += [(f"d{q}", f"d{t}") for t in targets if t != q]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.writelines(f"{a}\t{b}\n" for a, b in lines)
    return lines, rows


def test_the_buffer_never_holds_more_than_its_size_and_every_pair_comes_back(tmp_path: Path) -> None:
    lines, rows = _pairs_file(tmp_path / "pairs.tsv.gz", n_docs=200, seed=4)
    capacity = 40
    stream = PairStream(tmp_path / "pairs.tsv.gz", rows, rows, doc_doc=True, capacity=capacity)
    buffer = ShuffleBuffer(stream, seed=0)
    drawn: Counter[tuple[int, int]] = Counter()
    while buffer.passes < 4:
        run = buffer.next_run()
        drawn.update((run.query, int(d)) for d in run.docs)
        assert buffer.held <= capacity
    # The bound: counted pairs in the buffer (the run being read included), never the file's.
    assert buffer.peak <= capacity < len(lines)
    assert run.docs.size <= stream.max_run
    # Three whole passes were read and the fourth begun: each pair drawn or still buffered three times (four
    # for the first runs of the file), none lost or made up.
    drawn.update((run.query, int(d)) for run in buffer.buffer for d in run.docs)
    assert set(drawn) == {(rows[a], rows[b]) for a, b in lines}
    assert set(drawn.values()) <= {3, 4}
    # Not file order: the buffer shuffles.
    first = [buffer.next_run().query for _ in range(20)]
    assert first != sorted(first)


def test_the_counting_pass_drops_what_the_in_memory_index_drops_and_shards_partition_the_runs(tmp_path: Path) -> None:
    lines, rows = _pairs_file(tmp_path / "pairs.tsv", n_docs=50, seed=1)
    extra = [("d3", "d3"), ("d3", "nowhere"), ("ghost", "d1"), (lines[0][0], lines[0][1])]
    # Dirty lines placed inside their query's run, as a sorted file would have them.
    at = next(i for i, (a, _) in enumerate(lines) if a == "d3")
    dirty = lines[:1] + [extra[3]] + lines[1:at] + extra[:2] + lines[at:] + [extra[2]]
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in dirty), encoding="utf-8")
    stream = PairStream(tmp_path / "pairs.tsv", rows, rows, doc_doc=True, capacity=1000)
    count = stream.count()
    memory = index_pairs(read_pairs(tmp_path / "pairs.tsv"), rows, rows, doc_doc=True)
    assert count.pairs == memory.size
    assert count.dropped.dropped_summary() == memory.dropped_summary()
    shards = [list(stream.sharded(k, 3).runs()) for k in range(3)]
    assert [len(s) for s in shards] == [count.runs_of(k, 3) for k in range(3)]
    pairs = sorted((r.query, int(d)) for s in shards for r in s for d in r.docs)
    assert pairs == sorted(zip(memory.query_rows.tolist(), memory.doc_rows.tolist(), strict=True))


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--kind", "lsa"], "stream pairs with an SGD kind"), (["--self-pairs", "title"], "--pairs")],
)
def test_streaming_refuses_what_needs_pairs_in_memory(
    synonyms: SynonymCorpus, tmp_path: Path, extra: list[str], message: str
) -> None:
    args = ["train", "--corpus", str(synonyms.corpus), "--out", str(tmp_path / "b"), "--stream-pairs", "--epochs", "1"]
    if "--self-pairs" not in extra:
        args += ["--pairs", str(synonyms.train_pairs)]
    result = CliRunner().invoke(build_app(), args + extra)
    assert result.exit_code != 0 and message in result.output


def test_the_default_path_never_imports_ray(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    """Ray is optional (the cluster extra): a streamed single-process run loads no Ray module."""
    code = (
        "import sys\n"
        "from training.run import run_training\n"
        "from training.settings import TrainSettings\n"
        f"run_training(TrainSettings(corpus={str(synonyms.corpus)!r}, pairs={str(synonyms.train_pairs)!r}, "
        f"out={str(tmp_path / 'b')!r}, stream_pairs=True, epochs=1, n_dims=4, threads=1), show_progress=False)\n"
        "assert not [m for m in sys.modules if m == 'ray' or m.startswith('ray.')], 'ray was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_streamed_data_leaves_out_what_memory_leaves_out(synonyms: SynonymCorpus) -> None:
    """Unseen documents (--unseen-docs): the stream skips the same pairs and keeps the same validation pairs."""
    paths = {"pairs": synonyms.train_pairs, "valid_pairs": synonyms.valid_pairs, "unseen_share": 0.2, "split_seed": 1}
    memory = load_training_data(synonyms.corpus, **paths)  # type: ignore[arg-type]
    streamed = load_training_data(synonyms.corpus, **paths, stream_buffer=BUFFER)  # type: ignore[arg-type]
    assert streamed.unseen_pairs == memory.unseen_pairs > 0
    assert streamed.train_size == memory.train_size and streamed.valid_pairs == memory.valid_pairs
    valid_queries = {p.query_id for p in memory.valid_pairs}
    known = [(p.query_id, p.doc_id) for p in memory.train_pairs if p.query_id in valid_queries]
    assert sorted((p.query_id, p.doc_id) for p in streamed.train_pairs) == sorted(known)  # filtered validation
