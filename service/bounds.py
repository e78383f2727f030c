"""Checks of request values against the configured bounds, each failing with a message that names the field.

The static shape of a request is pydantic's job (service.schemas); these are the limits an operator
sets (SSI_MAX_K, SSI_MAX_QUERY_CHARS, ...), checked before any work is done so a refused request
changes nothing.

Two kinds of query text have two bounds: a short query (search) is refused beyond
SSI_MAX_QUERY_CHARS; a long text used as a query (a stored document in /similar, later a web page
for adverts) is cut to SSI_MAX_PAGE_CHARS (`cut_long_text`) and then to its SSI_MAX_PAGE_WORDS most
heavily weighted words (service.embedding.keep_top_words), since its cost grows with its distinct words.

What a request sends back is bounded too: an id or a name is quoted in a message by `shown`, cut to
a few dozen characters, so a 100,000-character id does not come back in its 404.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.errors import Conflict, InvalidInput
from service.schemas import DocumentIn, SearchOptions
from service.settings import Settings

SHOWN_CHARS = 64


def shown(value: str, limit: int = SHOWN_CHARS) -> str:
    """`value` quoted for a message, cut to `limit` characters with its length said (ids can be huge)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


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


def check_knobs(settings: Settings, ef_search: int | None, nprobe: int | None) -> None:
    """The index knobs a request may set, capped: a search's cost grows linearly with either."""
    if ef_search is not None and ef_search > settings.max_ef_search:
        raise InvalidInput(f"ef_search must be at most {settings.max_ef_search} (got {ef_search})")
    if nprobe is not None and nprobe > settings.max_nprobe:
        raise InvalidInput(f"nprobe must be at most {settings.max_nprobe} (got {nprobe})")


def check_search(settings: Settings, options: SearchOptions, queries: Sequence[str], batch: bool) -> None:
    check_paging(settings, options.k, options.offset)
    check_knobs(settings, options.ef_search, options.nprobe)
    if batch:
        if not queries:
            raise InvalidInput("queries is empty")
        if len(queries) > settings.max_batch:
            raise InvalidInput(f"at most {settings.max_batch} queries per batch (got {len(queries)})")
        if len(queries) * options.k > settings.max_batch_hits:
            raise InvalidInput(
                f"queries × k must be at most {settings.max_batch_hits} "
                f"(got {len(queries)} × {options.k} = {len(queries) * options.k})"
            )
    for i, query in enumerate(queries):
        check_query(settings, query, f"queries[{i}]" if batch else "query")


def check_document_id(settings: Settings, doc_id: str, field: str = "id") -> None:
    if not doc_id.strip():
        raise InvalidInput(f"{field}: document ids must not be empty")
    if len(doc_id) > settings.max_id_chars:
        raise InvalidInput(f"{field}: document ids are at most {settings.max_id_chars} characters (got {len(doc_id)})")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in doc_id):
        raise InvalidInput(f"{field}: document ids must not contain control characters")
    if doc_id.endswith("/similar"):
        raise InvalidInput(f"{field}: document ids must not end in '/similar' (that path finds similar documents)")


def check_documents(settings: Settings, docs: Sequence[DocumentIn], field: str = "documents") -> None:
    if not docs:
        raise InvalidInput(f"{field} is empty")
    if len(docs) > settings.max_documents_per_write:
        raise InvalidInput(f"at most {settings.max_documents_per_write} documents per write (got {len(docs)})")
    seen: set[str] = set()
    for i, doc in enumerate(docs):
        check_document_id(settings, doc.id, f"{field}[{i}].id")
        if doc.id in seen:
            raise Conflict(f"{field}[{i}].id: {shown(doc.id)} appears more than once in this request")
        seen.add(doc.id)
        if not (doc.title.strip() or doc.text.strip()):
            raise InvalidInput(f"{field}[{i}]: a document needs a title or a text")
        if "\x00" in doc.title or "\x00" in doc.text:
            raise InvalidInput(f"{field}[{i}]: title and text must not contain NUL characters")


# A query character takes at most 12 bytes of JSON (a surrogate pair of \u escapes).
JSON_BYTES_PER_CHAR = 12


def body_limits(settings: Settings) -> list[tuple[re.Pattern[str], int]]:
    """Body bounds of the routes whose bodies are small by nature (service.request_body): the largest
    body a valid request can need, so that parsing a hostile one holds the event loop only briefly."""
    query = JSON_BYTES_PER_CHAR * settings.max_query_chars + 64
    # What a search may ask of the fields (service.fields): a filter at its bounds with values of 256 bytes on
    # average, and the names of its facets and returned fields.
    fields = 128 * settings.max_filter_clauses + 256 * settings.max_filter_terms + 80 * 320
    prefix = "(?:/collections/[^/]+)?"
    return [
        (re.compile(f"POST {prefix}/search"), query + fields + 1024),
        (re.compile(f"POST {prefix}/search/batch"), settings.max_batch * query + fields + 1024),
        (re.compile("POST /admin/reload"), 64 * 1024),
    ]
