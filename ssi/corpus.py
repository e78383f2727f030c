"""Readers for the user's files: corpora, pair files, BEIR queries and qrels, query TSVs.

Every reader streams its file (gzip or plain), and a malformed line raises `DataFileError`
naming the file and the line, so a user can fix the file instead of reading a traceback.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from ssi.fields.filter_form import check_filter_form
from ssi.records import Document, Pair, Query


class DataFileError(ValueError):
    """A user-supplied file is missing or malformed; the message names the file and line."""

    def __init__(self, path: Path | str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.line = line
        self.problem = problem


def _open_binary(path: Path) -> IO[bytes]:
    if not path.is_file():
        raise DataFileError(path, None, "no such file")
    with path.open("rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else path.open("rb")


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without newline) for non-blank lines; decoded line by line so an encoding
    error names its own line."""
    path = Path(path)
    number = 0
    with _open_binary(path) as handle:
        try:
            for number, raw in enumerate(handle, start=1):  # noqa: B007 - used in the except
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    raise DataFileError(path, number, f"not valid UTF-8 ({exc.reason})") from None
                if line.strip():
                    yield number, line
        except (OSError, EOFError) as exc:
            raise DataFileError(path, number + 1, f"cannot read ({exc})") from None


def _json_object(path: Path, number: int, line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataFileError(path, number, f"not valid JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise DataFileError(path, number, "expected a JSON object")
    return record


def _string_field(path: Path, number: int, record: dict, *names: str, required: bool = True) -> str:
    for name in names:
        if name in record:
            value = record[name]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and name.endswith("id"):
                value = str(value)
            if not isinstance(value, str):
                raise DataFileError(path, number, f"field '{name}' must be a string")
            return value
    if required:
        raise DataFileError(path, number, f"missing field '{names[0]}'")
    return ""


def iter_corpus(
    path: Path | str, line_fields: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None
) -> Iterator[Document]:
    """Documents of a JSONL corpus: `id` (or BEIR's `_id`), optional `title`, `text`, optional `fields` (a flat
    object of filterable values, service.fields). `line_fields`: fields a collection reads from the rest of the line
    (an adverts corpus's top-level metadata, service.adverts.corpus_fields); the `fields` object wins a name both
    give."""
    path = Path(path)
    for number, line in numbered_lines(path):
        record = _json_object(path, number, line)
        doc_id = _string_field(path, number, record, "id", "_id")
        if not doc_id.strip():
            raise DataFileError(path, number, "empty document id")
        title = _string_field(path, number, record, "title", required=False)
        text = _string_field(path, number, record, "text")
        fields = record.get("fields")
        if fields is not None and not isinstance(fields, dict):
            raise DataFileError(path, number, "'fields' must be a JSON object of field names to values")
        extra = line_fields(record) if line_fields is not None else None
        if extra:
            fields = {**extra, **(fields or {})}
        yield Document(id=doc_id, title=title, text=text, fields=fields or None)


def read_corpus(path: Path | str) -> list[Document]:
    """The whole corpus; a repeated id is an error (it would silently shadow a document)."""
    docs: list[Document] = []
    seen: set[str] = set()
    for doc in iter_corpus(path):
        if doc.id in seen:
            raise DataFileError(path, len(docs) + 1, f"duplicate document id '{doc.id}'")
        seen.add(doc.id)
        docs.append(doc)
    if not docs:
        raise DataFileError(path, None, "the corpus holds no documents")
    return docs


def iter_pairs(path: Path | str) -> Iterator[Pair]:
    """`query_id<TAB>doc_id` lines one at a time (document-document pairs such as links): what a streamed
    training run reads (training.pair_stream), and `read_pairs` collects."""
    path = Path(path)
    for number, line in numbered_lines(path):
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise DataFileError(path, number, "expected 'query_id<TAB>doc_id'")
        yield Pair(parts[0], parts[1])


def read_pairs(path: Path | str) -> list[Pair]:
    """`query_id<TAB>doc_id` lines (document-document pairs such as links)."""
    return list(iter_pairs(path))


def read_qrels(path: Path | str) -> list[Pair]:
    """BEIR qrels (`query-id<TAB>corpus-id<TAB>score`, header optional); score > 0 is relevant."""
    path = Path(path)
    pairs: list[Pair] = []
    for number, line in numbered_lines(path):
        parts = line.split("\t")
        if number == 1 and parts[0].strip().lower() in {"query-id", "query_id", "qid"}:
            continue
        if len(parts) < 2:
            raise DataFileError(path, number, "expected 'query-id<TAB>corpus-id<TAB>score'")
        score = 1.0
        if len(parts) >= 3:
            try:
                score = float(parts[2])
            except ValueError:
                raise DataFileError(path, number, f"score '{parts[2]}' is not a number") from None
        if score > 0:
            pairs.append(Pair(parts[0], parts[1]))
    return pairs


def read_beir_queries(path: Path | str) -> list[Query]:
    """BEIR queries: JSONL with `_id` (or `id`) and `text`, and optionally a `filter` (the service's filter
    language, ssi.fields.filters: only the documents matching it are ranked for that query), checked for its form
    here (an unknown operator, a misplaced list: an error naming the line); its fields, against the corpus later."""
    path = Path(path)
    queries = []
    for number, line in numbered_lines(path):
        record = _json_object(path, number, line)
        node = record.get("filter")
        if node is not None:
            try:
                check_filter_form(node)
            except ValueError as exc:
                raise DataFileError(path, number, str(exc)) from None
        queries.append(
            Query(_string_field(path, number, record, "_id", "id"), _string_field(path, number, record, "text"), node)
        )
    return queries


def is_jsonl(path: Path | str) -> bool:
    """A file named as JSON lines (`.jsonl`, `.jsonl.gz`, `.json`): a query set in the BEIR form, not a TSV."""
    name = Path(path).name.lower()
    return name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson"))


def read_query_set(path: Path | str) -> list[Query]:
    """The queries of `ssi rank`: a TSV (`query_id<TAB>query text`), or JSON lines (`is_jsonl`) as BEIR writes
    them, where a line may carry a `filter`."""
    return read_beir_queries(path) if is_jsonl(path) else read_queries_tsv(path)


def read_queries_tsv(path: Path | str) -> list[Query]:
    """`query_id<TAB>query text` lines, the input of `ssi rank`."""
    path = Path(path)
    queries = []
    for number, line in numbered_lines(path):
        qid, sep, text = line.partition("\t")
        if not sep or not qid:
            raise DataFileError(path, number, "expected 'query_id<TAB>query text'")
        queries.append(Query(qid, text))
    return queries
