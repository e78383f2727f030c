"""Schemathesis hooks for `benchmarks.fuzz_api`: the one rule of the API that JSON Schema cannot state.

A write of several documents names each id once (the schema says so in words; `uniqueItems` would
only forbid identical documents). Generated bodies that repeat an id are dropped, so a refusal of
valid-looking data is always a real mismatch between the schema and the server.
"""

from __future__ import annotations

from typing import Any

import schemathesis


def repeats_an_id(body: Any) -> bool:
    documents = body.get("documents") if isinstance(body, dict) else None
    if not isinstance(documents, list):
        return False
    ids = [d["id"] for d in documents if isinstance(d, dict) and isinstance(d.get("id"), str)]
    return len(ids) != len(set(ids))


@schemathesis.hook
def filter_case(context: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    return not repeats_an_id(case.body)
