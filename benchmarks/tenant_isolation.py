"""Two tenants on one server for minutes (issue 63): each has a filtered read key (`SSI_READ_KEYS`), writers add
and rewrite the tenants' documents all the while, and a share of the documents keep moving from one tenant to the
other. Every answer a key gets is checked: no hit, facet value, document read or similar page of the other tenant.

Documents: Wikispeedia text cut into 60-word passages, tenant `acme` or `globex` alternately (`fields.tenant`),
ids prefixed with the tenant they were written for (`acme-…`, `globex-…`); a third of the ids are *movers*
(`move-…`) that writers keep rewriting under the other tenant. Per tenant, for `--minutes`:

- a writer: new documents of its tenant (`PUT /documents/{id}` with the write key) and rewrites of movers;
- a searcher: `/search` with its key (5 random words; `fields: ["tenant"]`, `facets: ["tenant"]`), a read by id of
  an id only the other tenant ever held (must be 404), `similar` on such an id (404), and `similar` on its own.

A violation: a hit, read or similar page whose document is shown under the other tenant (its returned `tenant`
field), an id of the other tenant's own prefix in any answer, a facet counting the other tenant, or a foreign id
answered with anything but 404.

    python -m benchmarks.tenant_isolation --bundle B --minutes 5 --out runs/tenant-isolation.json
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from benchmarks.replication_faults import write_figures
from service.bench.queries import passage_corpus
from service.bench.server import ServedProcess

TENANTS = ("acme", "globex")
WRITE_KEY = "isolation-write-key-000001"
READ_KEYS = {tenant: f"{tenant}-isolation-read-key-01" for tenant in TENANTS}


def seed_corpus(passages: Path, path: Path) -> list[str]:
    """The starting corpus: each passage a document of a tenant (alternately), a third of them movers."""
    texts = [json.loads(line)["text"] for line in passages.read_text(encoding="utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as handle:
        for n, text in enumerate(texts):
            tenant = TENANTS[n % 2]
            doc_id = f"move-{n}" if n % 3 == 0 else f"{tenant}-{n}"
            handle.write(json.dumps({"id": doc_id, "text": text, "fields": {"tenant": tenant}}) + "\n")
    return texts


class Tally:
    """Counts shared by the threads (a lock: they are few and coarse)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.violations: list[str] = []

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def violation(self, what: str) -> None:
        with self.lock:
            self.counts["violations"] += 1
            if len(self.violations) < 20:
                self.violations.append(what)


def writer(url: str, tenant: str, texts: list[str], deadline: float, tally: Tally, seed: int) -> None:
    """New documents of `tenant`, and movers rewritten under it (taking them from the other tenant)."""
    rng = random.Random(seed)
    headers = {"X-API-Key": WRITE_KEY}
    movers = [n for n in range(len(texts)) if n % 3 == 0]
    with httpx.Client(base_url=url, timeout=60, headers=headers) as client:
        for n in itertools.count():
            if time.monotonic() > deadline:
                return
            if n % 2:
                doc_id, text = f"{tenant}-new-{seed}-{n}", rng.choice(texts)
            else:
                mover = rng.choice(movers)
                doc_id, text = f"move-{mover}", texts[mover]
            body = {"text": text, "fields": {"tenant": tenant}}
            response = client.put(f"/documents/{doc_id}", json=body)
            tally.add("writes" if response.status_code == 200 else f"write_{response.status_code}")


def searcher(url: str, tenant: str, texts: list[str], deadline: float, tally: Tally, seed: int) -> None:
    """Searches, reads and similar pages with `tenant`'s key, each answer checked."""
    rng = random.Random(seed)
    other = next(t for t in TENANTS if t != tenant)
    words = " ".join(texts).split()
    foreign = [f"{other}-{n}" for n in range(len(texts)) if n % 3 and TENANTS[n % 2] == other]
    own = [f"{tenant}-{n}" for n in range(len(texts)) if n % 3 and TENANTS[n % 2] == tenant]
    with httpx.Client(base_url=url, timeout=60, headers={"X-API-Key": READ_KEYS[tenant]}) as client:
        while time.monotonic() < deadline:
            query = " ".join(rng.choice(words) for _ in range(5))
            body = {"query": query, "k": 10, "fields": ["tenant"], "facets": ["tenant"]}
            response = client.post("/search", json=body)
            if response.status_code != 200:
                tally.add(f"search_{response.status_code}")
                continue
            answer = response.json()
            tally.add("searches")
            tally.add("hits", len(answer["hits"]))
            for hit in answer["hits"]:
                if hit.get("fields", {}).get("tenant") != tenant or hit["id"].startswith(f"{other}-"):
                    tally.violation(f"{tenant} search shows {hit['id']} {hit.get('fields')}")
            for value in answer.get("facets", {}).get("tenant", {}).get("values", []):
                if value.get("value") != tenant:
                    tally.violation(f"{tenant} facet counts {value}")
            stranger = rng.choice(foreign)
            for path in (f"/documents/{stranger}", f"/documents/{stranger}/similar"):
                status = client.get(path).status_code
                tally.add("foreign_reads")
                if status != 404:
                    tally.violation(f"{tenant} GET {path}: {status}")
            similar = client.get(f"/documents/{rng.choice(own)}/similar", params={"k": 10})
            if similar.status_code == 200:
                tally.add("similar_pages")
                for hit in similar.json()["hits"]:
                    if hit["id"].startswith(f"{other}-"):
                        tally.violation(f"{tenant} similar shows {hit['id']}")


def main(
    bundle: Annotated[Path, typer.Option(help="The bundle the server serves.")],
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs (JSONL.gz), cut into passages.")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    passages: Annotated[int, typer.Option(help="Starting documents.")] = 5000,
    minutes: Annotated[float, typer.Option(help="How long both tenants search and write.")] = 5.0,
    work_dir: Annotated[Path, typer.Option(help="Passages, cache and server log.")] = Path("runs/isolation"),
    seed: Annotated[int, typer.Option(help="Seed of the writes and queries.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    raw = passage_corpus(corpus, work_dir / f"passages-{passages}.jsonl", limit=passages)
    texts = seed_corpus(raw, work_dir / f"tenants-{passages}.jsonl")
    filters = {READ_KEYS[t]: {"term": {"tenant": t}} for t in TENANTS}
    settings = {
        "SSI_API_KEY": WRITE_KEY,
        "SSI_READ_KEYS": json.dumps(filters),
        "SSI_CACHE_DIR": str(work_dir / f"cache-{passages}"),
        "SSI_DATA_DIR": str(work_dir / f"data-{passages}-{seed}-{time.time_ns()}"),
    }
    server = ServedProcess(bundle, work_dir / f"tenants-{passages}.jsonl", work_dir, settings)
    server.start()
    tally = Tally()
    deadline = time.monotonic() + 60 * minutes
    try:
        threads = [
            threading.Thread(target=role, args=(server.url, tenant, texts, deadline, tally, seed + i))
            for i, (role, tenant) in enumerate(itertools.product((writer, searcher), TENANTS))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        server.stop()
    figures: dict[str, Any] = {
        "documents_at_start": len(texts),
        "minutes": minutes,
        **dict(sorted(tally.counts.items())),
        "violations": tally.counts["violations"],
        "first_violations": tally.violations,
    }
    write_figures(figures, out)


if __name__ == "__main__":
    typer.run(main)
