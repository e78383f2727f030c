"""Errors the service answers with, each carrying its HTTP status and a message meant for the caller.

The domain code (collections, stores, index) raises these; one exception handler in `service.app`
turns them into `{"detail": message}` responses, so no route has to translate errors by hand and
no request ever sees a traceback.
"""

from __future__ import annotations


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


class Unavailable(ServiceError):
    """Not able to serve now: still loading, or no capacity within the queue timeout (503)."""

    status_code = 503
