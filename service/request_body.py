"""Request bodies are bounded in size and must be UTF-8, checked before any route sees them.

A body over `max_bytes` is refused with 413 as soon as its declared length or its received bytes go
over the bound (it is never read whole into memory). Routes whose bodies are small by nature get a
smaller bound (`route_limits`, from service.bounds.body_limits: a search body cannot need more than
its longest query), since parsing JSON holds the event loop for as long as the body is big.
A client that writes its whole body before it reads (urllib, requests, httpx) reads the 413 only if the
server reads that body first: a server that closes with unread bytes in its socket makes the kernel reset
the connection, and the client sees "connection reset by peer" instead of the answer. So the rest of a
body over the bound is read and dropped, up to DISCARD_BYTES, before the 413 goes out; a body declared
larger than that, or one whose client waits for "100 Continue" before sending it (curl), is answered at
once with `Connection: close` and never read.
A body that is not valid UTF-8 gets 400 with that message (FastAPI on its own would say only
"There was an error parsing the body"). The body is buffered (it is bounded) and replayed to the
app unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The most of a refused body read and dropped so that its client can read the refusal (see the module's doc).
DISCARD_BYTES = 64 * 1024 * 1024


async def reply_json(send: Send, status: int, detail: str, close: bool = False) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def discard_rest(receive: Receive, budget: int) -> bool | None:
    """Read and drop the rest of a request body: True when it ended within `budget` bytes, False when it did
    not (the connection is then closed with the answer), None when the client went away (nothing to answer)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        budget -= len(message.get("body", b""))
        if budget < 0:
            return False
        if not message.get("more_body", False):
            return True


async def refuse_after_reading(receive: Receive, send: Send, status: int, detail: str, budget: int) -> None:
    """Answer `status` once the request's body is read and dropped (at most `budget` more bytes; a negative
    budget reads none), so a client that writes its whole body first reads the answer."""
    drained = await discard_rest(receive, budget) if budget >= 0 else False
    if drained is not None:
        await reply_json(send, status, detail, close=not drained)


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, route_limits: Sequence[tuple[re.Pattern[str], int]] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.route_limits = route_limits

    def limit_for(self, scope: Scope) -> int:
        """The bound of this request's body: the first of `route_limits` matching "METHOD /path", else `max_bytes`."""
        target = f"{scope.get('method')} {scope.get('path', '')}"
        for pattern, limit in self.route_limits:
            if pattern.fullmatch(target):
                return min(limit, self.max_bytes)
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in {"POST", "PUT", "PATCH"}:
            await self.app(scope, receive, send)
            return
        max_bytes = self.limit_for(scope)
        too_large = f"request body is larger than {max_bytes} bytes"
        headers = dict(scope.get("headers", []))
        if b"content-length" in headers:
            try:
                declared = int(headers[b"content-length"])
            except ValueError:
                await reply_json(send, 400, "invalid Content-Length header", close=True)
                return
            if declared > max_bytes:
                waits = headers.get(b"expect", b"").lower() == b"100-continue"  # nothing sent yet: nothing to read
                budget = -1 if waits or declared > DISCARD_BYTES else declared
                await refuse_after_reading(receive, send, 413, too_large, budget)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                if message.get("more_body", False):
                    await refuse_after_reading(receive, send, 413, too_large, DISCARD_BYTES - size)
                else:
                    await reply_json(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            await reply_json(send, 400, f"request body is not valid UTF-8 (byte {exc.start})")
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
