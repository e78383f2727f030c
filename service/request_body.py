"""Request bodies are bounded in size and must be UTF-8, checked before any route sees them.

A body over `max_bytes` is refused with 413 as soon as its declared length or its received bytes go
over the bound (it is never read whole into memory). Routes whose bodies are small by nature get a
smaller bound (`route_limits`, from service.bounds.body_limits: a search body cannot need more than
its longest query), since parsing JSON holds the event loop for as long as the body is big.
A body that is not valid UTF-8 gets 400 with that message (FastAPI on its own would say only
"There was an error parsing the body"). The body is buffered (it is bounded) and replayed to the
app unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


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
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _reply(send, 400, "invalid Content-Length header")
                    return
                if declared > max_bytes:
                    await _reply(send, 413, too_large)
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
                await _reply(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            await _reply(send, 400, f"request body is not valid UTF-8 (byte {exc.start})")
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
