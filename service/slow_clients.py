"""Bounds on slow and idle clients, below the app: uvicorn's httptools protocol with deadlines and a cap.

uvicorn closes a connection idle between requests after its keep-alive timeout, but not one that never
sends a request, sends its headers a byte at a time, or trickles its body: each such connection holds a
socket and a file descriptor for as long as its client likes (the slowloris attack). Here every
connection gets
- `header_timeout` seconds from its first byte of a request (or from connecting) to the end of the
  request's headers, and `body_timeout` seconds from there to the end of its body; past either the
  client is answered 408 (when no answer has started) and the connection closed;
- at most `per_client` open connections from one client address; one more is answered 429 and closed
  before it is read. Behind a reverse proxy every client has the proxy's address: raise the cap there
  (SSI_MAX_CONNECTIONS_PER_CLIENT, 0 = no cap).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def _answer(status: int, reason: str, detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with the deadlines and the per-client cap above (the class attributes, set by `guarded`)."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0
    per_client: int = 0
    open_by_client: Counter[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._counted: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        if self.per_client and self.open_by_client[address] >= self.per_client:
            detail = f"more than {self.per_client} open connections from {address}"
            transport.write(_answer(429, "Too Many Requests", detail))
            transport.close()
            return
        self.open_by_client[address] += 1
        self._counted = address
        self._arm(self.header_timeout, "request headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted is not None:
            self.open_by_client[self._counted] -= 1
            if self.open_by_client[self._counted] <= 0:
                del self.open_by_client[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a request on a kept-alive connection: its headers' clock starts now
            self._arm(self.header_timeout, "request headers")

    def on_headers_complete(self) -> None:
        self._arm(self.body_timeout, "request body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        if seconds > 0:
            self._deadline = self.loop.call_later(seconds, self._expire, seconds, what)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, seconds: float, what: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
            self.transport.write(_answer(408, "Request Timeout", f"the {what} took longer than {seconds:g} s"))
        self.transport.close()


def guarded(header_timeout: float, body_timeout: float, per_client: int) -> type[GuardedHttpToolsProtocol]:
    """A protocol class for one server (its own connection counts), to pass as uvicorn's `http`."""
    return type(
        "ServerHttpProtocol",
        (GuardedHttpToolsProtocol,),
        {
            "header_timeout": header_timeout,
            "body_timeout": body_timeout,
            "per_client": per_client,
            "open_by_client": Counter(),
        },
    )
