"""The Host header check (SSI_ALLOWED_HOSTS): Starlette's TrustedHostMiddleware, answering in JSON.

A server reachable under names it does not expect can be driven by DNS rebinding (a web page whose
name resolves to the server makes the visitor's browser call it); refusing unknown Host headers
stops that. Loopback names are always allowed, so the container healthcheck (which calls
127.0.0.1) keeps working. Starlette's middleware answers a refused host in plain text; every error
of this service is JSON with a message, so the refusal is rewritten here.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.request_body import DISCARD_BYTES, refuse_after_reading

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


class AllowedHostsMiddleware:
    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allowed = [*allowed_hosts, *LOOPBACK_HOSTS]
        self.check = TrustedHostMiddleware(self._passed, allowed_hosts=self.allowed, www_redirect=False)

    async def _passed(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["ssi.host_allowed"] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_json(message: Message) -> None:
            # A response that did not come through `_passed` is the middleware's refusal.
            if scope.get("ssi.host_allowed"):
                await send(message)
            elif message["type"] == "http.response.start":
                # Read and drop the body first, so that a client writing its whole body before it reads gets this.
                detail = "Host header not allowed on this server (SSI_ALLOWED_HOSTS)"
                await refuse_after_reading(receive, send, 400, detail, _drain_budget(scope))

        await self.check(scope, receive, send_json)


def _drain_budget(scope: Scope) -> int:
    """How much of a refused body to read before answering: none for a client waiting for "100 Continue" or one
    declaring more than DISCARD_BYTES (answered at once, the connection closed), else up to DISCARD_BYTES."""
    headers = dict(scope.get("headers") or [])
    if headers.get(b"expect", b"").lower() == b"100-continue":
        return -1
    try:
        declared = int(headers.get(b"content-length", b"0"))
    except ValueError:
        return -1
    return -1 if declared > DISCARD_BYTES else DISCARD_BYTES
