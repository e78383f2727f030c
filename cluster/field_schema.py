"""The cluster's field types (service.fields): one type per name over every shard, as one node has one per name.

Each shard's store fixes a name's type by the first document there that uses it (or a write that carries it), so
shards written independently could type a name differently: `price` a float on one shard, a keyword on another. The
router therefore checks every write against the collection-wide types, the union of the shards' types (asked from
the shards, kept, and asked again when a request names a field it does not know: a name's type never changes once
fixed), refuses a value of another type (409 naming the document, the field and both types, nothing written on any
shard), and sends each write with the types of the names it uses, which the owning shard fixes in the write's own
transaction (service.store: a date-like string of a keyword field is then a keyword there too). A write that gives
a name its first type takes a lock of this router, and asks the shards again first, so that two writes through it
never fix one name two ways.

Two router replicas giving one new name different types at the same moment on different shards could still both be
taken (each one's view of the shards was taken before the other's write). The shards then disagree, the router says
so: a filter, facet or write naming that field is a 409 naming the field and the shards' types, never a filter
applied with one type on one shard and another elsewhere. An index built by `ssi index` never disagrees (it refuses
a corpus that types a name two ways: cluster.index_job).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from service.errors import Conflict
from service.fields.checks import admit

# Every shard's field types (ShardServer.field_types), shard by shard.
AskTypes = Callable[[], Awaitable[list[dict[str, str]]]]


class FieldSchema:
    """The collection-wide field types the router checks requests and writes against (module docstring)."""

    def __init__(self, ask: AskTypes) -> None:
        self._ask = ask
        self.types: dict[str, str] = {}
        self.disagree: dict[str, dict[int, str]] = {}  # name → the type each shard has, where shards disagree
        self._known = False
        self._first_use = asyncio.Lock()

    async def refresh(self) -> None:
        per_shard = await self._ask()
        types: dict[str, str] = {}
        disagree: dict[str, dict[int, str]] = {}
        for held in per_shard:
            for name, field_type in held.items():
                if types.setdefault(name, field_type) != field_type:
                    disagree[name] = {s: t[name] for s, t in enumerate(per_shard) if name in t}
        self.types, self.disagree, self._known = types, disagree, True

    async def known(self, names: Iterable[str]) -> dict[str, str]:
        """The types, asked from the shards again if one of `names` is not among them; a 409 if the shards disagree
        on one of them."""
        wanted = set(names)
        if not self._known or not wanted <= set(self.types):
            await self.refresh()
        self.refuse_disagreement(wanted)
        return self.types

    def refuse_disagreement(self, names: Iterable[str]) -> None:
        for name in sorted(set(names) & set(self.disagree)):
            held = ", ".join(f"{t} on shard {s}" for s, t in sorted(self.disagree[name].items()))
            raise Conflict(
                f"field '{name}' has different types on the shards ({held}): the cluster neither filters, counts nor "
                "writes it; rebuild the index with one type per field (ssi index)"
            )

    async def admit(
        self, docs: Sequence[Mapping[str, Any]], write: Callable[[list[dict[str, Any]], dict[str, str]], Awaitable[Any]]
    ) -> Any:
        """Check `docs` (dicts with `id` and `fields`) against the cluster's types and `write` them: with their
        fields as stored (a whole float of an integer field as an int) and the types of the names they use. A name
        new to the cluster is fixed under this router's lock, after asking the shards again."""
        names = {name for doc in docs for name in doc.get("fields") or {}}
        if not names:
            return await write([dict(doc) for doc in docs], {})
        await self.known(names)
        if names <= set(self.types):
            return await self._write(docs, names, write)
        async with self._first_use:
            await self.refresh()
            self.refuse_disagreement(names)
            return await self._write(docs, names, write)

    async def _write(
        self,
        docs: Sequence[Mapping[str, Any]],
        names: set[str],
        write: Callable[[list[dict[str, Any]], dict[str, str]], Awaitable[Any]],
    ) -> Any:
        added, stored = admit(self.types, ((doc["id"], doc.get("fields")) for doc in docs))  # a 409: nothing sent
        types = {name: self.types.get(name) or added[name] for name in names}
        result = await write([{**doc, "fields": fields} for doc, fields in zip(docs, stored, strict=True)], types)
        for name, field_type in added.items():
            self.types.setdefault(name, field_type)
        return result
