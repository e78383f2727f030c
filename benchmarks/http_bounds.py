"""What one hostile request costs the server: the probes of issue 14's HTTP defects, measured on a real server.

Each probe sends the request an attacker (or a careless client) would and reports what it cost:
time, response size, the latency of a `/healthz` sent meanwhile (is the event loop free?), the
server's peak memory, the size of `/metrics`. `--repo DIR` serves from another checkout (for
example `git archive HEAD | tar -x -C /tmp/before`), so the figures before and after a change come
from the same script:

    python -m benchmarks.http_bounds --out /tmp/after.json
    python -m benchmarks.http_bounds --repo /tmp/before --out /tmp/before.json
"""

from __future__ import annotations

import http.client
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

import httpx
import typer

from benchmarks.api_world import REPO, Server, World, write_world

KEY = "bench-key-0123456789abcdef"
JSON = {"content-type": "application/json"}


def raw_request(url: str, method: str, target: str) -> tuple[int, bytes, dict[str, str]]:
    """A request with no client-side limits (httpx refuses URLs over 64 kB): status, body, headers."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request(method, target)
        response = connection.getresponse()
        return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def _healthz_watch(url: str, during: Callable[[], Any]) -> tuple[Any, float]:
    """Run `during()` while another client polls /healthz; returns its result and the worst /healthz latency."""
    stop = threading.Event()
    worst = [0.0]

    def poll() -> None:
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                started = time.perf_counter()
                client.get(f"{url}/healthz")
                worst[0] = max(worst[0], time.perf_counter() - started)
                time.sleep(0.02)

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.1)
    try:
        result = during()
    finally:
        stop.set()
        thread.join()
    return result, worst[0]


def probe_validation_flood(server: Server) -> dict[str, Any]:
    """Defect 1: a 2 MB body of 10⁶ wrong-typed items to /search/batch, and 2 MB of unknown fields to /search."""
    out: dict[str, Any] = {}
    bodies = {
        "batch_1e6_ints": ("/search/batch", b'{"queries":[' + b",".join([b"1"] * 1_000_000) + b"]}"),
        "search_2e5_extra_fields": (
            "/search",
            b'{"query":"a",' + b",".join(b'"f%d":1' % i for i in range(200_000)) + b"}",
        ),
    }
    for name, (path, body) in bodies.items():
        rss_before = server.rss_mb()

        def send(path: str = path, body: bytes = body) -> httpx.Response:
            return httpx.post(f"{server.url}{path}", content=body, headers=JSON, timeout=600)

        started = time.perf_counter()
        response, healthz = _healthz_watch(server.url, send)
        out[name] = {
            "request_bytes": len(body),
            "status": response.status_code,
            "response_bytes": len(response.content),
            "seconds": round(time.perf_counter() - started, 3),
            "worst_healthz_seconds": round(healthz, 3),
            "rss_mb_before": round(rss_before, 1),
            "peak_rss_mb": round(server.peak_rss_mb(), 1),
        }
    return out


def probe_metric_labels(server: Server) -> dict[str, Any]:
    """Defect 2: 50 made-up methods and one 60,000-character method, then the size of /metrics."""
    before = httpx.get(f"{server.url}/metrics").text
    statuses = []
    for i in range(50):
        statuses.append(raw_request(server.url, f"FOOBAR{i}", "/search")[0])
    statuses.append(raw_request(server.url, "X" * 60_000, "/search")[0])
    after = httpx.get(f"{server.url}/metrics").text
    return {
        "statuses": sorted(set(statuses)),
        "metrics_lines_before": before.count("\n"),
        "metrics_lines_after": after.count("\n"),
        "metrics_bytes_after": len(after.encode()),
    }


def _long_queries(world: World, n: int, chars: int) -> list[str]:
    """Queries of `chars` characters: one vocabulary word, then words that occur in no document, so a
    snippet scan of every hit finds nothing and runs to its end (the worst case)."""
    queries = []
    for i in range(n):
        words = [world.words[100 + i]]
        j = 0
        while sum(len(w) + 1 for w in words) < chars:
            words.append(f"qx{i}w{j}")
            j += 1
        queries.append(" ".join(words)[:chars])
    return queries


def probe_snippets(server: Server, world: World) -> dict[str, Any]:
    """Defect 3: batches of 64 queries × k=100 of 4,000 characters over 50,000-character documents."""
    batch = {"queries": _long_queries(world, 64, 4000), "k": 100}
    with httpx.Client(base_url=server.url, timeout=600) as client:
        started = time.perf_counter()
        one = client.post("/search/batch", json=batch)
        single_batch = time.perf_counter() - started
    statuses: list[int] = []
    searches: list[int] = []
    stop = threading.Event()

    def run_batch() -> None:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            statuses.append(client.post("/search/batch", json=batch).status_code)

    def run_searches() -> None:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            while not stop.is_set():
                searches.append(client.post("/search", json={"query": world.words[7]}).status_code)
                time.sleep(0.05)

    threads = [threading.Thread(target=run_batch) for _ in range(8)]
    watcher = threading.Thread(target=run_searches)
    started = time.perf_counter()
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    eight = time.perf_counter() - started
    stop.set()
    watcher.join()
    return {
        "batch_status": one.status_code,
        "batch_detail": one.json().get("detail") if one.status_code != 200 else None,
        "one_batch_seconds": round(single_batch, 3),
        "eight_batches_seconds": round(eight, 3),
        "eight_batches_statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
        "searches_meanwhile": {str(s): searches.count(s) for s in sorted(set(searches))},
    }


def probe_similar_and_ids(server: Server, world: World) -> dict[str, Any]:
    """Defect 3: /similar on a 7.5 MB document and a 404 for a 100,000-character id; defect 10: lone surrogates."""
    out: dict[str, Any] = {}
    key = {"X-API-Key": KEY, **JSON}
    # No keep-alive: the server closes idle connections after 5 s, and some probes take longer.
    with httpx.Client(base_url=server.url, timeout=600, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        text = " ".join(world.words[i % 2500] for i in range(1_100_000))[:7_500_000]
        put = client.put("/documents/huge", content=json.dumps({"text": text}).encode(), headers=key)
        out["put_7_5_mb_status"] = put.status_code
        if put.status_code == 200:
            times = []
            for _ in range(3):
                started = time.perf_counter()
                response = client.get("/documents/huge/similar")
                times.append(time.perf_counter() - started)
            out["similar_status"] = response.status_code
            out["similar_seconds_median"] = round(statistics.median(times), 3)
            client.delete("/documents/huge", headers={"X-API-Key": KEY})
        long_id = "a" * 100_000
        for name, target in (
            ("get_100k_id", f"/documents/{long_id}"),
            ("similar_100k_id", f"/documents/{long_id}/similar"),
        ):
            status, body, _ = raw_request(server.url, "GET", target)
            out[name] = {"status": status, "response_bytes": len(body)}
        for field in ("id", "title", "text"):
            body = {"documents": [{"id": "s1", "title": "t", "text": "baba"}]}
            raw = json.dumps(body).replace(
                '"t"' if field == "title" else '"baba"' if field == "text" else '"s1"', '"\\ud800"'
            )
            response = client.post("/documents", content=raw.encode(), headers=key)
            out[f"surrogate_in_{field}"] = {"status": response.status_code, "detail": response.json().get("detail")}
        response = client.put(f"/documents/{quote('s2')}", content=b'{"text": "a\\udfff"}', headers=key)
        out["surrogate_put"] = {"status": response.status_code, "detail": response.json().get("detail")}
        response = client.request("OPTIONS", "/documents/doc-00001")
        out["options_documents_id"] = {"status": response.status_code, "allow": response.headers.get("allow")}
        response = client.request("PATCH", "/documents/doc-00001")
        out["patch_documents_id"] = {"status": response.status_code, "allow": response.headers.get("allow")}
    return out


def probe_ef_search(server: Server, world: World) -> dict[str, Any]:
    """Defect 3: ef_search at the schema's old ceiling (65,536) against the default, on an HNSW index."""
    out: dict[str, Any] = {}
    with httpx.Client(base_url=server.url, timeout=600) as client:
        for ef in (None, 65_536):
            body: dict[str, Any] = {"query": " ".join(world.words[10:15]), "k": 10}
            if ef is not None:
                body["ef_search"] = ef
            times, status = [], 0
            for _ in range(5):
                started = time.perf_counter()
                status = client.post("/search", json=body).status_code
                times.append(time.perf_counter() - started)
            out[f"ef_{ef or 'default'}"] = {"status": status, "seconds_median": round(statistics.median(times), 4)}
    return out


def main(
    repo: Annotated[Path, typer.Option(help="checkout to serve from")] = REPO,
    out: Annotated[Path | None, typer.Option(help="write the figures here as JSON")] = None,
    work: Annotated[Path | None, typer.Option(help="working folder (default: a temporary one)")] = None,
    hnsw_docs: Annotated[int, typer.Option(help="documents of the HNSW collection")] = 20_000,
) -> None:
    """Measure every probe and print the figures as JSON."""
    figures: dict[str, Any] = {"repo": str(repo)}
    with tempfile.TemporaryDirectory() as tmp:
        root = work or Path(tmp)
        small = write_world(root / "small", n_docs=300)
        env = {"SSI_API_KEY": KEY}
        with Server(small, env, repo) as server:
            figures["validation_flood"] = probe_validation_flood(server)
        with Server(small, env, repo) as server:
            figures["metric_labels"] = probe_metric_labels(server)
            figures["similar_ids_surrogates"] = probe_similar_and_ids(server, small)
        long_docs = write_world(root / "long", n_docs=300, words_per_doc=(7500, 8500), seed=1)
        with Server(long_docs, env, repo) as server:
            figures["snippets"] = probe_snippets(server, long_docs)
        big = write_world(root / "big", n_docs=hnsw_docs, seed=2)
        with Server(big, {**env, "SSI_INDEX_TYPE": "hnsw"}, repo) as server:
            figures["ef_search"] = probe_ef_search(server, big)
    text = json.dumps(figures, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
