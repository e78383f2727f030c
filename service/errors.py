"""Errors the service answers with, each carrying its HTTP status and a message meant for the caller.

The domain code (collections, stores, index) raises these; one exception handler in `service.app`
turns them into `{"detail": message}` responses, so no route has to translate errors by hand and
no request ever sees a traceback.
"""

from __future__ import annotations

from service.schemas import ErrorBody, ValidationErrorBody


class ServiceError(Exception):
    status_code = 400

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers


class InvalidInput(ServiceError):
    """Well-formed JSON whose values are out of range (the same status FastAPI gives type errors)."""

    status_code = 422


class Unauthorized(ServiceError):
    status_code = 401


class Forbidden(ServiceError):
    status_code = 403


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    status_code = 409


class WrongCollectionType(ServiceError):
    """The route does not serve collections of this type (search on an adverts collection, say)."""

    status_code = 409


class Overloaded(ServiceError):
    """Too many requests already waiting: come back later (429)."""

    status_code = 429


class StorageFull(ServiceError):
    """The disk under the document store is full: the write was not applied (507, RFC 4918); retry once there is
    room. Reads go on; nothing acknowledged before is lost."""

    status_code = 507


class Unavailable(ServiceError):
    """Not able to serve now: still loading, or no capacity within the queue timeout (503)."""

    status_code = 503


# What each error status means on this service: the descriptions of the OpenAPI schema.
ERROR_MEANINGS = {
    400: "a body that is not UTF-8, a malformed Content-Length, a Host not in SSI_ALLOWED_HOSTS, or a request line"
    " and headers past the HTTP server's 16 KiB",
    401: "a key is needed and the X-API-Key header is missing or wrong",
    403: "refused by configuration (no key set for writes, a bundle outside SSI_BUNDLE_ROOT)",
    404: "no such document or collection",
    409: "the collection's type does not serve this route, a reload is already running, a write names an id twice, "
    "or a field's value is of another type than the collection's field (service.fields)",
    413: "the body is larger than SSI_MAX_BODY_BYTES",
    422: "a value that is out of bounds or of the wrong type; the first problems are listed",
    429: "too many requests waiting; retry after Retry-After seconds",
    503: "still loading, or no capacity within SSI_QUEUE_TIMEOUT; retry after Retry-After seconds",
    507: "the disk under the document store is full: the write was not applied; retry when there is room",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The `responses=` of a route that can answer `statuses`, each with the error body it returns."""
    return {
        status: {"model": ValidationErrorBody if status == 422 else ErrorBody, "description": ERROR_MEANINGS[status]}
        for status in statuses
    }
