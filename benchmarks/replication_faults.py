"""Replicated shards under faults: a local Ray cluster of three labelled worker nodes, writes and searches through
the routers, and a fault injector, for --minutes (docs/operate/replication.md).

    python -m benchmarks.replication_faults --minutes 10 --out runs/replication-faults.json

A generated corpus and a random lowrank bundle (benchmarks.cluster_scale), indexed into --shards shards served with
3 copies each. The head runs with Ray's GCS fault tolerance (its tables in a persistent Redis the cluster starts,
cluster.local), the coordinator keeps the shard map in that Redis, one router runs on each worker node and every
node has Serve's HTTP proxy: the clients call the worker nodes' proxies (RAY_SERVE_WORKER_PROXY_HTTP_PORT: on one
machine they share a port of their own), and a probe searches through the head's proxy too. Two writers put new
documents and delete acknowledged ones, two searchers search, all the time. The injector repeats, in turn: kill -9
of a random copy; kill -9 of the head's GCS, started again after --head-down seconds; every process of the head
killed (kill -9: the whole head node, as a lost machine) and a new head started after --head-down seconds on the same
GCS address and Redis (this process, a Ray driver attached to the head's raylet, leaves the cluster first and joins
again after); every process of one node killed, the node started again after --down seconds; every process of the
head frozen (SIGSTOP) for --head-down seconds, past the failure timeout; a primary frozen past the failure timeout,
then let go; Redis killed (kill -9) and started again on its files (and the GCS, should it have exited meanwhile);
one node killed and its folder deleted before it comes back. After each fault it waits until every copy is in sync
again (the round's recovery).

Figures: the answers by kind and status; among the answers sent while a node was down (after the failure timeout),
and while the head was away, the share of 200s; each round's recovery seconds, and for the head's faults the time
from its return to the first write acknowledged and to the first answer of the head's proxy; every primary's term
after each round (higher after a failover, never lower); and the checks afterwards: every acknowledged put there, no
acknowledged delete back, each acknowledged put's fields as written, no partial ranking, every copy of a shard
holding the same documents (their fields included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from benchmarks.cluster_scale import random_bundle
from service.bench.queries import generate_corpus, keyword_queries
from ssi.bundle import load_bundle

FAILURE_TIMEOUT = 2.0
K = 10
HEAD_FAULTS = ("kill-gcs", "kill-head", "freeze-head", "restart-redis")


@dataclass
class Log:
    """Every answer: (sent at, kind, status, answered at); the acknowledged puts and deletes; partial rankings."""

    answers: list[tuple[float, str, int, float]] = field(default_factory=list)
    puts: set[str] = field(default_factory=set)
    deletes: set[str] = field(default_factory=set)
    uncertain: set[str] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)  # acknowledged puts a later delete did not find (404)
    partial: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # "kind status: the answer's message" of every non-200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def failed(self, kind: str, status: int, response: httpx.Response | None) -> None:
        """Count a non-200 answer by its message (under the lock)."""
        message = "no answer" if response is None else response.text[:160]
        self.failures[f"{kind} {status}: {message}"] += 1


def fields_of(doc_id: str) -> dict[str, Any]:
    """A written document's fields, from its id (`w<writer>-<n>`): each must be there, equal, on every copy."""
    worker, n = doc_id[1:].split("-")
    return {"writer": f"w{worker}", "n": int(n)}


def writer(url: str, worker: int, texts: list[str], log: Log, stop: threading.Event) -> None:
    rng = random.Random(worker)
    with httpx.Client(base_url=url, timeout=30) as client:
        n = 0
        while not stop.is_set():
            n += 1
            sent = time.monotonic()
            with log.lock:
                mine = sorted(d for d in log.puts if d.startswith(f"w{worker}-"))
            kind = "delete" if n % 4 == 0 and mine else "put"
            doc_id = rng.choice(mine) if kind == "delete" else f"w{worker}-{n}"
            path = f"/documents/{quote(doc_id, safe='')}"
            response = None
            try:
                if kind == "delete":
                    response = client.delete(path)
                else:
                    body = {"title": doc_id, "text": rng.choice(texts), "fields": fields_of(doc_id)}
                    response = client.put(path, json=body)
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            with log.lock:
                log.answers.append((sent, kind, status, time.monotonic()))
                if status not in (200, 404):
                    log.failed(kind, status, response)
                if status == 200 and kind == "put":
                    log.puts.add(doc_id)
                elif status == 200:
                    log.puts.discard(doc_id)
                    log.deletes.add(doc_id)
                elif status == 404:  # an acknowledged put that is not there: lost (the router retries no write)
                    log.missing.append(doc_id)
                    log.puts.discard(doc_id)
                else:  # not acknowledged: it may or may not have been applied
                    log.uncertain.add(doc_id)
                    log.puts.discard(doc_id)


def searcher(
    url: str, worker: int, queries: list[str], log: Log, stop: threading.Event, kind: str = "search", pause: float = 0
) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        n = worker
        while not stop.is_set():
            n += 1
            sent = time.monotonic()
            response = None
            try:
                response = client.post("/search", json={"query": queries[n % len(queries)], "k": K})
                status = response.status_code
                whole = status != 200 or len(response.json()["hits"]) == K
            except httpx.HTTPError:
                status, whole = 0, True
            with log.lock:
                log.answers.append((sent, kind, status, time.monotonic()))
                log.partial += not whole
                if status != 200:
                    log.failed(kind, status, response)
            time.sleep(pause)


def views(timeout: float = 60.0) -> list[Any]:
    """The coordinator's map, waiting for the coordinator (being started again with the head) up to `timeout`."""
    import ray

    from cluster import deploy
    from cluster.replication.ray_replicas import coordinator_of

    deadline = time.monotonic() + timeout
    while True:
        try:
            return list(ray.get(coordinator_of(deploy.GROUPS[-1]).views.remote(), timeout=10))
        except Exception:  # noqa: BLE001 — the head (and the coordinator) coming back
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def head_fault(local: Any, fault: str, seconds: float) -> float:
    """The head's fault (HEAD_FAULTS), over when it returns; the time it returned."""
    if fault == "kill-head":
        local.kill_head()
        time.sleep(seconds)
        local.start_head()
        back = time.monotonic()
        local.connect()
        return back
    if fault == "kill-gcs":
        local.kill_gcs()
        time.sleep(seconds)
        local.restart_gcs()
    elif fault == "freeze-head":
        frozen = local.head_processes()
        for process in frozen:
            process.suspend()
        time.sleep(seconds)
        for process in reversed(frozen):
            process.resume()
    else:
        local.redis.kill()
        time.sleep(seconds)
        local.redis.start()
        if not local.gcs_alive():  # the GCS exits when its Redis goes away: started again, as a supervisor would
            print("the GCS exited while Redis was away: started again", flush=True)
            local.restart_gcs()
    return time.monotonic()


def after(log: Log, kinds: set[str], since: float) -> float | None:
    """Seconds from `since` to the first 200 of `kinds` sent after it (None: none)."""
    with log.lock:
        done = [d for t, k, s, d in log.answers if k in kinds and s == 200 and t >= since]
    return round(min(done) - since, 2) if done else None


def terms_of(current: list[Any]) -> list[tuple[int, str]]:
    return [(v.term, v.primary) for v in current]


def copy_actor(name: str) -> Any:
    import ray

    from cluster import deploy
    from cluster.replication.ray_replicas import NAMESPACE, actor_name

    return ray.get_actor(actor_name(deploy.GROUPS[-1], name), namespace=NAMESPACE)


def wait_changed(before: list[Any], timeout: float = 20.0) -> None:
    """Until the map shows the fault (a copy out of sync, a new term): a recovery is timed from the fault to the
    map's return to every copy in sync, not from a map that has not noticed yet."""
    started = time.monotonic()
    while time.monotonic() - started < timeout and [(v.term, v.version) for v in views()] == [
        (v.term, v.version) for v in before
    ]:
        time.sleep(0.1)


def wait_in_sync(copies: int, timeout: float = 300.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if all(len(v.in_sync) == copies for v in views()):
            return time.monotonic() - started
        time.sleep(0.25)
    raise RuntimeError(f"copies not in sync after {timeout:g}s: {views()}")


def build_world(work: Path, docs: int, shards: int) -> tuple[list[str], list[str]]:
    """A generated corpus and a random bundle indexed into `shards` under `work/index`; queries (5 random words of
    a document each) and texts to write."""
    from cluster.index_job import build_index

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bundle = random_bundle(work / "bundle", dims=32, vocab_words=5000)
    corpus = generate_corpus(work / "corpus.jsonl", load_bundle(bundle).vocab, docs)
    build_index(corpus, bundle, work / "index", shards, batch_size=256)
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()[:200]]
    return keyword_queries(corpus, 200, 5), texts


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from ray import serve

    from cluster import deploy
    from cluster.local import LocalCluster
    from service.settings import Settings

    work = Path(args.work)
    queries, texts = build_world(work, args.docs, args.shards)
    rng = random.Random(0)
    port = 8000 + rng.randrange(1000)
    # Every worker node's proxy on a port of its own (the head's keeps `port`): one machine, one port per host.
    os.environ["RAY_SERVE_WORKER_PROXY_HTTP_PORT"] = str(port + 1)
    local = LocalCluster(workers=3, cpus_per_node=1, object_store_mb=128, redis_dir=work / "head" / "redis")
    log, stop = Log(), threading.Event()
    rounds: list[dict[str, Any]] = []
    down: list[tuple[float, float]] = []  # when a node was down (after the failure timeout)
    head_windows: list[tuple[str, float, float]] = []  # when the head (its GCS, all of it, or its Redis) was away
    try:
        local.connect()
        options = deploy.ClusterOptions(
            shard_cpus=0,
            replicas=3,
            node_dir=work / "nodes",
            retry_seconds=10.0,
            shard_timeout_seconds=8.0,
            router_on_workers=True,
            router_replicas=3,
            map_store=local.map_store,
        )
        deploy.start(work / "index", Settings(host="127.0.0.1", port=port, insecure_writes=True), options)
        url, head_url = f"http://127.0.0.1:{port + 1}", f"http://127.0.0.1:{port}"
        wait_in_sync(3)
        threads = [threading.Thread(target=writer, args=(url, w, texts, log, stop), daemon=True) for w in range(2)]
        threads += [threading.Thread(target=searcher, args=(url, s, queries, log, stop), daemon=True) for s in range(2)]
        threads.append(
            threading.Thread(target=searcher, args=(head_url, 9, queries, log, stop, "search-head", 0.2), daemon=True)
        )
        for thread in threads:
            thread.start()
        started = time.monotonic()
        faults = args.faults.split(",")
        i = 0
        while time.monotonic() - started < args.minutes * 60:
            fault = faults[i % len(faults)]
            i += 1
            at, before = time.monotonic(), views()
            record: dict[str, Any] = {"fault": fault}
            if fault == "kill-copy":
                name = rng.choice([n for v in views() for n in v.replicas])
                os.kill(int(ray.get(copy_actor(name).pid.remote())), signal.SIGKILL)
            elif fault == "freeze-primary":
                name = rng.choice(views()).primary
                pid = int(ray.get(copy_actor(name).pid.remote()))
                os.kill(pid, signal.SIGSTOP)
                time.sleep(3 * FAILURE_TIMEOUT)
                os.kill(pid, signal.SIGCONT)
            elif fault in HEAD_FAULTS:
                back = head_fault(local, fault, args.head_down if fault != "restart-redis" else args.redis_down)
                head_windows.append((fault, at, back))
                record["away_s"] = round(back - at, 2)
                record["returned_at"] = back  # the times from its return are read from the log at the end
                record["started_at"] = at
            else:
                node = rng.randrange(3)
                local.kill_worker(node)
                time.sleep(args.down)
                if fault == "wipe-node":
                    shutil.rmtree(work / "nodes" / f"n{node}", ignore_errors=True)
                down.append((at + FAILURE_TIMEOUT, time.monotonic()))
                local.workers[node] = local.add_worker(node)
            if fault not in HEAD_FAULTS:
                wait_changed(before)
            wait_in_sync(3)
            now = views()
            record["recovery_s"] = round(time.monotonic() - at, 2)
            record["terms"] = [list(t) for t in terms_of(now)]
            # every primary's term: higher after a failover, never lower
            record["terms_ok"] = all(
                b.term <= a.term and (b.primary == a.primary or b.term < a.term)
                for b, a in zip(before, now, strict=True)
            )
            rounds.append(record)
            print(rounds[-1], flush=True)
            time.sleep(args.pause)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        for record in rounds:
            if "returned_at" in record:
                back, at = record.pop("returned_at"), record.pop("started_at")
                with log.lock:  # when the searches through the worker nodes' proxies that failed were sent
                    record["worker_proxy_failures_sent_at_s"] = [
                        round(t - at, 1) for t, k, s, _ in log.answers if k == "search" and s != 200 and at <= t <= back
                    ]
                record["writes_acknowledged_after_return_s"] = after(log, {"put", "delete"}, back)
                record["worker_proxy_first_answer_after_return_s"] = after(log, {"search"}, back)
                record["head_proxy_first_answer_after_return_s"] = after(log, {"search-head"}, back)
        with httpx.Client(base_url=url, timeout=30) as client:
            read = {d: client.get(f"/documents/{quote(d, safe='')}") for d in log.puts}
            lost = [d for d, r in read.items() if r.status_code != 200]
            # Fields through the faults: each acknowledged put's as written (the copies' fingerprints hash them too).
            wrong_fields = [
                d for d, r in read.items() if r.status_code == 200 and r.json().get("fields") != fields_of(d)
            ]
            back_ = [d for d in log.deletes if client.get(f"/documents/{quote(d, safe='')}").status_code != 404]
        prints = {
            v.shard: sorted({tuple(ray.get(copy_actor(n).fingerprint.remote())) for n in v.replicas}) for v in views()
        }
        deploy.stop()
        serve.shutdown()
    finally:
        stop.set()
        local.shutdown()

    def share(kind: str, windows: list[tuple[float, float]]) -> dict[str, Any]:
        inside = [s for t, k, s, _ in log.answers if k in kind.split() and any(a <= t <= b for a, b in windows)]
        return {
            "answers": len(inside),
            "ok_share": round(sum(s == 200 for s in inside) / max(len(inside), 1), 4),
            "statuses": dict(sorted(Counter(str(s) for s in inside).items())),
        }

    head_away = [(a, b) for _, a, b in head_windows]
    head_rounds = {f: [r for r in rounds if r["fault"] == f] for f in HEAD_FAULTS}
    return {
        "minutes": args.minutes,
        "documents": args.docs,
        "shards": args.shards,
        "copies": 3,
        "cores": os.cpu_count(),
        "answers": dict(sorted(Counter(f"{k} {s}" for _, k, s, _ in log.answers).items())),
        "one_node_down": {"searches": share("search", down), "writes": share("put delete", down)},
        "head_away": {
            "searches_worker_proxies": share("search", head_away),
            "searches_head_proxy": share("search-head", head_away),
            "writes": share("put delete", head_away),
            "by_fault": {
                fault: {
                    "searches_worker_proxies": share("search", [(a, b) for f, a, b in head_windows if f == fault]),
                    "searches_head_proxy": share("search-head", [(a, b) for f, a, b in head_windows if f == fault]),
                    "writes": share("put delete", [(a, b) for f, a, b in head_windows if f == fault]),
                }
                for fault in HEAD_FAULTS
            },
        },
        "head_rounds": head_rounds,
        "rounds": rounds,
        "terms_ok_every_round": all(r["terms_ok"] for r in rounds),
        "acknowledged_puts_lost": len(lost) + len(log.missing),
        "acknowledged_puts_with_other_fields": len(wrong_fields),
        "acknowledged_puts_missing_at_delete": log.missing,
        "acknowledged_deletes_back": len(back_),
        "partial_rankings": log.partial,
        "failures": dict(log.failures.most_common()),
        "copies_agree": all(len(p) == 1 for p in prints.values()),
        "fingerprints": {str(k): [list(f) for f in v] for k, v in prints.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--down", type=float, default=15.0, help="seconds a killed node stays down")
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between a recovery and the next fault")
    parser.add_argument(
        "--head-down", type=float, default=10.0, help="seconds the head's GCS or the whole head is killed, or it frozen"
    )
    parser.add_argument(
        "--faults",
        default="kill-copy,kill-gcs,kill-head,kill-node,freeze-head,freeze-primary,restart-redis,wipe-node",
        help="the faults, in turn (a comma-separated list of those above)",
    )
    parser.add_argument("--redis-down", type=float, default=5.0, help="seconds Redis is down before it restarts")
    parser.add_argument("--work", default="/tmp/ssi-replication-faults")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    unknown = set(args.faults.split(",")) - set(parser.get_default("faults").split(","))
    if unknown:
        parser.error(f"--faults: unknown {sorted(unknown)}; known: {parser.get_default('faults')}")
    write_figures(run(args), args.out)


def write_figures(figures: dict[str, Any], out: Path | None) -> None:
    """Print a run's figures as JSON, and write them to `out` where given (both replication benchmarks)."""
    text = json.dumps(figures, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
