"""The learner's side of online confirmation: a candidate that passed the offline gate is interleaved with the
served model by the service (`/admin/interleave`, service.interleave) and promoted only when the service's
sequential test says it wins (ssi.interleaving), or dropped when it loses or runs out of its session budget.

Why the learner acts and not the service: one actor changes what is served (the learner also reloads after an
offline promotion, rolls back and keeps the history), and a comparison the service has decided simply waits,
answered by the served model alone, until the learner's next look (`conclude`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from ssi.interleaving import (
    DEFAULT_ALPHA,
    DEFAULT_BETA,
    DEFAULT_BUDGET,
    DEFAULT_DELTA,
    DEFAULT_MODE,
    DEFAULT_SHARE,
    TestMode,
)

TIMEOUT = 600  # seconds: starting a comparison loads the candidate's index in the answering worker
# `ssi learn --z` where interleaving confirms: the offline estimate only keeps out candidates it finds worse (its
# mean below 0), and the online test, whose wrong promotions are bounded (ssi.interleaving), decides. The offline
# estimate alone could not tell candidates 0.005-0.01 better from the served model
# (docs/results/learning-loop.md), so at z = 1 it held back real gains for rounds.
ONLINE_Z = 0.0


@dataclass(frozen=True, slots=True)
class OnlineSettings:
    """`POST /admin/interleave`'s settings (ssi.interleaving says what each does)."""

    share: float = DEFAULT_SHARE
    mode: TestMode = DEFAULT_MODE
    delta: float = DEFAULT_DELTA
    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    budget: int = DEFAULT_BUDGET


@dataclass(frozen=True, slots=True)
class Conclusion:
    """What the learner did with a comparison it looked at."""

    outcome: Literal["running", "promoted", "dropped"]
    bundle: str  # the candidate's folder
    status: dict[str, Any]  # GET /admin/interleave's answer when looked at
    reload: dict[str, Any] | None = None  # POST /admin/reload's answer, when promoted

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Admin:
    """The admin routes of one `ssi serve` for one collection."""

    def __init__(self, server: str, admin_key: str | None, collection: str | None) -> None:
        self.server = server.rstrip("/")
        self.headers = {"X-API-Key": admin_key} if admin_key else {}
        self.collection = collection

    def _call(self, method: str, route: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        params = {"collection": self.collection} if self.collection is not None and body is None else None
        response = httpx.request(
            method, f"{self.server}{route}", json=body, params=params, headers=self.headers, timeout=TIMEOUT
        )
        if response.status_code != 200:
            raise RuntimeError(f"{method} {route} answered {response.status_code}: {response.text[:500]}")
        return response.json()

    def _body(self, **fields: Any) -> dict[str, Any]:
        return {**fields, **({"collection": self.collection} if self.collection is not None else {})}

    def start(self, bundle: Path, online: OnlineSettings) -> dict[str, Any]:
        return self._call("POST", "/admin/interleave", self._body(bundle=str(bundle.resolve()), **asdict(online)))

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/admin/interleave")

    def end(self) -> dict[str, Any]:
        return self._call("DELETE", "/admin/interleave")

    def reload(self, bundle: Path) -> dict[str, Any]:
        return self._call("POST", "/admin/reload", self._body(bundle=str(bundle.resolve())))


def conclude(admin: Admin) -> Conclusion | None:
    """Act on the collection's comparison: None when none runs; `running` while undecided; otherwise promote the
    candidate (POST /admin/reload) when the test says it wins, and end the comparison either way."""
    status = admin.status()
    if not status.get("running"):
        return None
    bundle = str(status["comparison"]["bundle"])
    decision = status.get("decision")
    if decision in (None, "running"):
        return Conclusion("running", bundle, status)
    reloaded = admin.reload(Path(bundle)) if decision == "promote" else None
    admin.end()
    return Conclusion("promoted" if reloaded is not None else "dropped", bundle, status, reloaded)
