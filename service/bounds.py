"""Checks of request values against the configured bounds, each failing with a message that names the field.

The static shape of a request is pydantic's job (service.schemas); these are the limits an operator
sets (SSI_MAX_K, SSI_MAX_QUERY_CHARS, ...), checked before any work is done so a refused request
changes nothing.

Two kinds of query text have two bounds: a short query (search) is refused beyond
SSI_MAX_QUERY_CHARS; a long text used as a query (a stored document in /similar, later a web page
for adverts) is cut to SSI_MAX_PAGE_CHARS (`cut_long_text`) and then to its SSI_MAX_PAGE_WORDS most
heavily weighted words (service.embedding.keep_top_words), since its cost grows with its distinct words.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.errors import InvalidInput
from service.schemas import DocumentIn, SearchOptions
from service.settings import Settings


def check_paging(settings: Settings, k: int, offset: int) -> None:
    if not 1 <= k <= settings.max_k:
        raise InvalidInput(f"k must be between 1 and {settings.max_k} (got {k})")
    if not 0 <= offset <= settings.max_offset:
        raise InvalidInput(f"offset must be between 0 and {settings.max_offset} (got {offset})")


def check_query(settings: Settings, query: str, field: str = "query") -> None:
    if not query.strip():
        raise InvalidInput(f"{field} is empty")
    if len(query) > settings.max_query_chars:
        raise InvalidInput(f"{field} is longer than {settings.max_query_chars} characters (got {len(query)})")
    if "\x00" in query:
        raise InvalidInput(f"{field} contains a NUL character")


def cut_long_text(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, at the last whitespace when there is one in the
    second half (so the last word is not cut into another word)."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    return cut[:space] if space > max_chars // 2 else cut


def check_search(settings: Settings, options: SearchOptions, queries: Sequence[str], batch: bool) -> None:
    check_paging(settings, options.k, options.offset)
    if batch:
        if not queries:
            raise InvalidInput("queries is empty")
        if len(queries) > settings.max_batch:
            raise InvalidInput(f"at most {settings.max_batch} queries per batch (got {len(queries)})")
    for i, query in enumerate(queries):
        check_query(settings, query, f"queries[{i}]" if batch else "query")


def check_document_id(settings: Settings, doc_id: str, field: str = "id") -> None:
    if not doc_id.strip():
        raise InvalidInput(f"{field}: document ids must not be empty")
    if len(doc_id) > settings.max_id_chars:
        raise InvalidInput(f"{field}: document ids are at most {settings.max_id_chars} characters (got {len(doc_id)})")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in doc_id):
        raise InvalidInput(f"{field}: document ids must not contain control characters")


def check_documents(settings: Settings, docs: Sequence[DocumentIn], field: str = "documents") -> None:
    if not docs:
        raise InvalidInput(f"{field} is empty")
    if len(docs) > settings.max_documents_per_write:
        raise InvalidInput(f"at most {settings.max_documents_per_write} documents per write (got {len(docs)})")
    seen: set[str] = set()
    for i, doc in enumerate(docs):
        check_document_id(settings, doc.id, f"{field}[{i}].id")
        if doc.id in seen:
            raise InvalidInput(f"{field}[{i}].id: {doc.id!r} appears more than once in this request")
        seen.add(doc.id)
        if not (doc.title.strip() or doc.text.strip()):
            raise InvalidInput(f"{field}[{i}]: a document needs a title or a text")
        if "\x00" in doc.title or "\x00" in doc.text:
            raise InvalidInput(f"{field}[{i}]: title and text must not contain NUL characters")
