"""`ssi.Client`: a typed client for a running SSI search service (`ssi serve`).

The HTTP contract is the service's (`service/routes/`, `service/schemas.py`, and `GET /openapi.json` of a
running server); this module restates the few bodies it reads as dataclasses instead of importing them,
so that a client needs only httpx: no FastAPI, no FAISS, no model. Every answer that is not a 2xx becomes
a `ServiceError` carrying the server's status and message (`{"detail": ...}`), and for a 422 the fields
it names. Network failures stay httpx's own exceptions (`httpx.TransportError`).

In the examples, `url` is a running service's address, `api_key` its SSI_API_KEY, which only writes need,
`query` a text to search for.

Examples:
    >>> import ssi
    >>> with ssi.Client(url, api_key=api_key) as client:
    ...     result = client.search(query, k=3)
    ...     written = client.put_document("note-1", title="Apples", text="a sweet red apple")
    ...     stored = client.get_document("note-1")
    >>> len(result.hits), stored.title
    (3, 'Apples')

Documents may carry `fields` and a search a `filter`, `facets` and the `fields` to return with each hit (the
service's filter language, docs/guides/fields.md); every search method takes them as keywords, so a call written
before them reads as it did.
    >>> try:
    ...     ssi.Client(url).search(query, k=0)
    ... except ssi.ServiceError as error:
    ...     print(error.status, error.message)
    422 ...k...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from ssi.records import Document

DEFAULT_TIMEOUT = 30.0


class ServiceError(Exception):
    """The service refused a request: `status` is the HTTP status, `message` the server's own words.

    `errors`: for a 422, the problems the server listed (`loc`, `msg`, `type` each); `retry_after`: the
    seconds a 429 or 503 asks the caller to wait, when it says.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.errors = errors or []
        self.retry_after = retry_after


R = TypeVar("R")


def _record(kind: type[R], body: Mapping[str, Any]) -> R:
    """`kind` from a response body's fields, ignoring any it does not have: a newer server may add fields (as
    `sentence` was added to /match's adverts) without breaking an older client."""
    names = {f.name for f in fields(kind)}  # type: ignore[arg-type]
    return kind(**{key: value for key, value in body.items() if key in names})


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked document: score = semantic + lexical (+ sentence), the exact f(q, d) split into its parts;
    `sentence` is a hybrid bundle's third part λ e(q)·e(d) (ssi.hybrid), None for any other bundle."""

    id: str
    title: str
    snippet: str
    score: float
    semantic: float
    lexical: float
    sentence: float | None = None
    fields: dict[str, Any] | None = None  # the fields the search asked for (`fields=`) that the document has


@dataclass(frozen=True, slots=True)
class Facet:
    """A keyword field's most frequent values over every document matching the search's filter, most first
    (value, documents), and `other`: the counts of the values left out, summed."""

    values: list[tuple[str | bool, int]]
    other: int


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The hits for one query; `candidates`: documents scored exactly; `query_words`: known query words.
    `matched`: the documents matching the search's filter and `facets` by field, when it had a filter or facets."""

    hits: list[SearchHit]
    query_words: int
    candidates: int
    collection: str
    took_ms: float  # for a batch: the whole batch's time
    impression: str | None = None  # names this answer for `Client.click` (None: the server records no traffic)
    matched: int | None = None
    facets: dict[str, Facet] | None = None


@dataclass(frozen=True, slots=True)
class ClickResult:
    """A reported click: `recorded` False when it was reported before (it counts once); where it was shown."""

    recorded: bool
    position: int


@dataclass(frozen=True, slots=True)
class StoredDocument:
    collection: str
    id: str
    title: str
    text: str
    seq: int  # the write sequence number of this version
    fields: dict[str, Any] = field(default_factory=dict)  # the document's fields (docs/guides/fields.md)


@dataclass(frozen=True, slots=True)
class WriteResult:
    collection: str
    ids: list[str]
    seq: int  # the write sequence number of the last document written


@dataclass(frozen=True, slots=True)
class DeleteResult:
    collection: str
    id: str
    deleted: bool
    seq: int


@dataclass(frozen=True, slots=True)
class AdMatch:
    """One advert for a page, with the words that made the match; `sentence` as in SearchHit."""

    id: str
    title: str
    text: str
    score: float
    semantic: float
    lexical: float
    category: str | None
    advertiser: str | None
    budget: bool
    shared_words: list[str]  # words of both page and advert, strongest first
    related_words: list[str]  # page words that pulled the advert most through the semantic part
    sentence: float | None = None


@dataclass(frozen=True, slots=True)
class PageMatch:
    """The adverts for one page; `page_words`: page words the model knows; `ranked`: adverts scored exactly."""

    ads: list[AdMatch]
    page_words: int
    ranked: int
    collection: str
    took_ms: float
    impression: str | None = None  # names this answer for `Client.click`


@dataclass(frozen=True, slots=True)
class Advert:
    collection: str
    id: str
    title: str
    text: str
    active: bool
    category: str | None
    advertiser: str | None
    budget: bool
    seq: int | None


@dataclass(frozen=True, slots=True)
class AdFilter:
    """Which adverts a match may return (a paused advert never): any of these categories, advertisers, budget."""

    category: list[str] | None = None
    advertiser: list[str] | None = None
    budget: bool | None = None

    def body(self) -> dict[str, Any]:
        """The JSON the service reads (`filters` of `POST /match`), without the fields left open."""
        given = {"category": self.category, "advertiser": self.advertiser, "budget": self.budget}
        return {name: value for name, value in given.items() if value is not None}


def _search_result(body: Mapping[str, Any], collection: str, took_ms: float) -> SearchResult:
    facets = body.get("facets")
    return SearchResult(
        hits=[_record(SearchHit, hit) for hit in body["hits"]],
        query_words=body["query_words"],
        candidates=body["candidates"],
        collection=collection,
        took_ms=took_ms,
        impression=body.get("impression"),
        matched=body.get("matched"),
        facets=None
        if facets is None
        else {
            name: Facet([(item["value"], item["count"]) for item in facet["values"]], facet["other"])
            for name, facet in facets.items()
        },
    )


def _page_matches(body: Mapping[str, Any]) -> list[PageMatch]:
    return [
        PageMatch(
            ads=[_record(AdMatch, ad) for ad in result["ads"]],
            page_words=result["page_words"],
            ranked=result["ranked"],
            collection=body["collection"],
            took_ms=body["took_ms"],
            impression=result.get("impression"),
        )
        for result in body["results"]
    ]


def _path_id(doc_id: str) -> str:
    """An id as one path segment: "a/b" is a%2Fb, "C++" is C%2B%2B (the service takes the rest of the path)."""
    return quote(doc_id, safe="")


class Client:
    """A connection to one service (`url`), optionally to one named collection of it.

    `api_key` is sent as X-API-Key on every request: writes need SSI_API_KEY, and reads need a key only when
    the service sets SSI_READ_KEY. `collection`: the named collection to address (`/collections/{name}/...`);
    None: the default collection, and for adverts the one adverts collection the service hosts. `http`: an
    httpx client of your own (proxies, TLS, a test transport), left open by `close()`.
    Use it as a context manager, or call `close()`, to release its connections.
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        collection: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        http: httpx.Client | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.collection = collection
        self.timeout = timeout
        self._own = http is None
        self.http = http if http is not None else httpx.Client(timeout=timeout)
        self._headers = {"X-API-Key": api_key} if api_key is not None else {}
        self._base = self.url + (f"/collections/{quote(collection, safe='')}" if collection else "")

    def __repr__(self) -> str:
        return f"Client(url={self.url!r}, collection={self.collection!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (a client passed in as `http` is left to its owner)."""
        if self._own:
            self.http.close()

    def in_collection(self, name: str) -> Client:
        """The same service and key, addressing the collection `name` (sharing this client's connections)."""
        return Client(self.url, api_key=self.api_key, collection=name, timeout=self.timeout, http=self.http)

    # -- transport ---------------------------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None, root: bool = False
    ) -> Any:
        url = (self.url if root else self._base) + path
        response = self.http.request(method, url, json=json, params=params, headers=self._headers)
        if response.is_success:
            return response.json()
        raise _error(response)

    # -- search ------------------------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = 10,
        offset: int = 0,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
        filter: Mapping[str, Any] | None = None,
        facets: Sequence[str] = (),
        fields: Sequence[str] = (),
    ) -> SearchResult:
        """The exact top k documents for a short query (`POST /search`), after skipping `offset` of them.

        `filter`: only the documents matching it (e.g. `{"term": {"category": "books"}}`, docs/guides/fields.md);
        `facets`: keyword fields whose most frequent values are counted over every matching document
        (`SearchResult.facets`); `fields`: the fields returned with each hit (`SearchHit.fields`)."""
        options = FieldOptions(filter, facets, fields)
        body = self._request(
            "POST", "/search", json=_search_body({"query": query}, k, offset, ef_search, nprobe, options)
        )
        return _search_result(body, body["collection"], body["took_ms"])

    def search_batch(
        self,
        queries: Sequence[str],
        k: int = 10,
        offset: int = 0,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
        filter: Mapping[str, Any] | None = None,
        facets: Sequence[str] = (),
        fields: Sequence[str] = (),
    ) -> list[SearchResult]:
        """`search` for several queries in one request (`POST /search/batch`), answered in order; `filter`,
        `facets` and `fields` apply to each query, as in `search`."""
        options = FieldOptions(filter, facets, fields)
        body = self._request(
            "POST",
            "/search/batch",
            json=_search_body({"queries": list(queries)}, k, offset, ef_search, nprobe, options),
        )
        return [_search_result(result, body["collection"], body["took_ms"]) for result in body["results"]]

    def similar(self, doc_id: str, k: int = 10, offset: int = 0) -> SearchResult:
        """The documents most like a stored one (it is the query, and is left out): `GET /documents/{id}/similar`."""
        body = self._request("GET", f"/documents/{_path_id(doc_id)}/similar", params={"k": k, "offset": offset})
        return _search_result(body, body["collection"], body["took_ms"])

    def click(self, impression: str, doc_id: str, *, dwell_ms: float | None = None) -> ClickResult:
        """Report that a user clicked `doc_id` of the answer named `impression` (`POST /clicks`): the traffic log
        `ssi train --clicks` learns from. A 404 `ServiceError` for an unknown impression or an id it did not show."""
        body: dict[str, Any] = {"impression": impression, "id": doc_id}
        if dwell_ms is not None:
            body["dwell_ms"] = dwell_ms
        return _record(ClickResult, self._request("POST", "/clicks", json=body))

    # -- documents ---------------------------------------------------------------------------------------------

    def get_document(self, doc_id: str) -> StoredDocument:
        """A stored document (`GET /documents/{id}`); a `ServiceError` 404 when there is none."""
        return _record(StoredDocument, self._request("GET", f"/documents/{_path_id(doc_id)}"))

    def put_document(
        self, doc_id: str, *, title: str = "", text: str = "", fields: Mapping[str, Any] | None = None
    ) -> WriteResult:
        """Add or replace one document (`PUT /documents/{id}`); searchable when this returns. `fields`: its
        filterable values (a flat object: keywords, keyword lists, numbers, booleans, ISO 8601 dates); a value of
        another type than its field's is a `ServiceError` 409 naming the field and both types."""
        body: dict[str, Any] = {"title": title, "text": text}
        if fields:
            body["fields"] = dict(fields)
        return _record(WriteResult, self._request("PUT", f"/documents/{_path_id(doc_id)}", json=body))

    def put_documents(self, documents: Iterable[Document]) -> WriteResult:
        """Add or replace several documents in one transaction (`POST /documents`): all of them or none; each
        `Document`'s `fields` go with it."""
        body = {"documents": [_document_body(d) for d in documents]}
        return _record(WriteResult, self._request("POST", "/documents", json=body))

    def delete_document(self, doc_id: str) -> DeleteResult:
        """Delete one document (`DELETE /documents/{id}`); a `ServiceError` 404 when there is none."""
        return _record(DeleteResult, self._request("DELETE", f"/documents/{_path_id(doc_id)}"))

    # -- adverts -----------------------------------------------------------------------------------------------

    def match(self, page: str, k: int = 10, *, filters: AdFilter | None = None) -> PageMatch:
        """The k best adverts for a web page's text that the filters admit (`POST /match`)."""
        return self._match({"page": page}, k, filters)[0]

    def match_pages(self, pages: Sequence[str], k: int = 10, *, filters: AdFilter | None = None) -> list[PageMatch]:
        """`match` for several pages in one request, answered in order."""
        return self._match({"pages": list(pages)}, k, filters)

    def match_document(
        self, page_id: str, k: int = 10, *, documents: str | None = None, filters: AdFilter | None = None
    ) -> PageMatch:
        """`match` with a stored document as the page: `page_id` of the documents collection `documents`
        (None: the default one)."""
        page: dict[str, Any] = {"page_id": page_id}
        if documents is not None:
            page["documents"] = documents
        return self._match(page, k, filters)[0]

    def _match(self, page: dict[str, Any], k: int, filters: AdFilter | None) -> list[PageMatch]:
        body = {**page, "k": k, **({"filters": filters.body()} if filters is not None else {})}
        return _page_matches(self._request("POST", "/match", json=body))

    def get_advert(self, ad_id: str) -> Advert:
        """An advert with its metadata (`GET /adverts/{id}`)."""
        return _record(Advert, self._request("GET", f"/adverts/{_path_id(ad_id)}"))

    def put_advert(
        self,
        ad_id: str,
        *,
        title: str = "",
        text: str = "",
        active: bool = True,
        category: str | None = None,
        advertiser: str | None = None,
        budget: bool = True,
    ) -> WriteResult:
        """Add or replace one advert, its text and metadata (`PUT /adverts/{id}`); `active=False`: paused."""
        body = {
            "title": title, "text": text, "active": active,
            "category": category, "advertiser": advertiser, "budget": budget,
        }  # fmt: skip
        return _record(WriteResult, self._request("PUT", f"/adverts/{_path_id(ad_id)}", json=body))

    def update_advert(self, ad_id: str, **changes: bool | str | None) -> Advert:
        """Change an advert's metadata only (`PATCH /adverts/{id}`): `active` (pause, resume), `category`,
        `advertiser`, `budget`. The text and its embedding are kept, so this is instant."""
        return _record(Advert, self._request("PATCH", f"/adverts/{_path_id(ad_id)}", json=changes))

    def delete_advert(self, ad_id: str) -> DeleteResult:
        """Delete one advert, text and metadata (`DELETE /adverts/{id}`)."""
        return _record(DeleteResult, self._request("DELETE", f"/adverts/{_path_id(ad_id)}"))

    # -- the service -------------------------------------------------------------------------------------------

    def model(self) -> dict[str, Any]:
        """The served model and its index, as `GET /model` describes them (form, sizes, metrics, index)."""
        return dict(self._request("GET", "/model"))

    def ready(self) -> dict[str, Any]:
        """`GET /readyz`: whether every collection is loaded; a `ServiceError` 503 while one is not."""
        return dict(self._request("GET", "/readyz", root=True))


@dataclass(frozen=True, slots=True)
class FieldOptions:
    """What a search asks of the documents' fields; each sent only when given, so a plain search's body is as
    it always was (and a server without fields answers it)."""

    filter: Mapping[str, Any] | None = None
    facets: Sequence[str] = ()
    fields: Sequence[str] = ()

    def body(self) -> dict[str, Any]:
        given: dict[str, Any] = {"filter": dict(self.filter)} if self.filter is not None else {}
        if self.facets:
            given["facets"] = [self.facets] if isinstance(self.facets, str) else list(self.facets)
        if self.fields:
            given["fields"] = [self.fields] if isinstance(self.fields, str) else list(self.fields)
        return given


def _search_body(
    body: dict[str, Any],
    k: int,
    offset: int,
    ef_search: int | None,
    nprobe: int | None,
    options: FieldOptions = FieldOptions(),
) -> dict[str, Any]:
    body.update(k=k, offset=offset)
    if ef_search is not None:
        body["ef_search"] = ef_search
    if nprobe is not None:
        body["nprobe"] = nprobe
    body.update(options.body())
    return body


def _document_body(document: Document) -> dict[str, Any]:
    body: dict[str, Any] = {"id": document.id, "title": document.title, "text": document.text}
    if document.fields:
        body["fields"] = document.fields
    return body


def _error(response: httpx.Response) -> ServiceError:
    """The server's `{"detail": message}` (and a 422's `errors`) as a `ServiceError`; any other body as text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        message, errors = body["detail"], body.get("errors")
    else:
        message, errors = response.text or response.reason_phrase, None
    retry = response.headers.get("Retry-After")
    try:
        retry_after = float(retry) if retry is not None else None
    except ValueError:
        retry_after = None
    return ServiceError(
        response.status_code, message, errors=errors if isinstance(errors, list) else None, retry_after=retry_after
    )
