"""Malformed corpus and pair files give an error naming the file and the line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ssi.corpus import DataFileError, read_corpus, read_pairs, read_qrels
from ssi_cli.main import build_app


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_corpus_reader_accepts_gzip_and_beir_ids(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "7", "title": "T", "text": "body"}) + "\n")
    docs = read_corpus(path)
    assert docs[0].id == "7" and docs[0].full_text == "T\nbody"


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ('{"id": "a", "text": "x"}\n{"id": "b", "text": \n', 2, "not valid JSON"),
        ('{"id": "a", "text": "x"}\n\n{"id": "b"}\n', 3, "missing field 'text'"),
        ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', 2, "duplicate document id"),
        ('["a", "b"]\n', 1, "expected a JSON object"),
        ('{"id": "a", "text": 5}\n', 1, "field 'text' must be a string"),
    ],
)
def test_malformed_corpus_names_file_and_line(tmp_path: Path, content: str, line: int, problem: str) -> None:
    path = write(tmp_path / "corpus.jsonl", content)
    with pytest.raises(DataFileError) as info:
        read_corpus(path)
    assert f"{path}:{line}" in str(info.value)
    assert problem in str(info.value)


def test_invalid_utf8_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\n{"id": "b", "text": "\xff"}\n')
    with pytest.raises(DataFileError, match=r"corpus.jsonl:2: not valid UTF-8"):
        read_corpus(path)


def test_malformed_pairs_and_qrels(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match=r"pairs.tsv:2: expected 'query_id<TAB>doc_id'"):
        read_pairs(write(tmp_path / "pairs.tsv", "a\tb\nno-tab-here\n"))
    with pytest.raises(DataFileError, match=r"qrels.tsv:2: score 'high' is not a number"):
        read_qrels(write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\thigh\n"))
    assert [
        p.doc_id for p in read_qrels(write(tmp_path / "ok.tsv", "query-id\tcorpus-id\tscore\nq\td\t1\nq\te\t0\n"))
    ] == ["d"]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such file"):
        read_pairs(tmp_path / "absent.tsv")


def test_train_cli_reports_bad_file_without_traceback(tmp_path: Path) -> None:
    corpus = write(tmp_path / "corpus.jsonl", '{"id": "a", "text": "x y"}\n{"id": "b", "text": "x z"}\n')
    pairs = write(tmp_path / "pairs.tsv", "a\tb\nbroken\n")
    result = CliRunner().invoke(
        build_app(),
        ["train", "--corpus", str(corpus), "--pairs", str(pairs), "--out", str(tmp_path / "b"), "--no-progress"],
    )
    assert result.exit_code == 2
    assert f"{pairs}:2" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "b").exists()


def test_train_cli_rejects_missing_source(tmp_path: Path) -> None:
    corpus = write(tmp_path / "corpus.jsonl", '{"id": "a", "text": "x"}\n')
    result = CliRunner().invoke(build_app(), ["train", "--corpus", str(corpus), "--out", str(tmp_path / "b")])
    assert result.exit_code != 0
    assert "give one of --pairs" in result.output and "--self-pairs" in result.output
