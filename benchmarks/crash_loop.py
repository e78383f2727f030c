"""The crash loop: SIGKILL the real server at random moments during write bursts, restart it, and check it.

Each round starts `python -m service serve` (a real process: SQLite WAL store, FAISS index,
snapshots, the write log), lets several client threads write as fast as they can (add, replace,
delete, and three-document batches) while another searches, and SIGKILLs the process at a random
moment: mostly during the burst, sometimes while it is still loading (before /readyz). A burst ends
after a random number of acknowledged puts (and at least one acknowledged delete and click), not
after a random time, so that a slow or loaded machine still writes before each kill; a kill while
loading lands at a random moment of the previous start-up's duration, or as the server becomes ready
if that comes first. Snapshots are frequent and compaction eager, so kills land before, during and
after snapshot writes, log trims and online compactions. After every restart it checks:

- the index loads (/readyz answers 200) and its document count equals the expected one;
- every acknowledged write is there with its exact text, every acknowledged delete is absent (a
  write whose answer the kill cut off may have landed or not: it must read as one or the other);
- every acknowledged click (a searcher clicks one hit of each answer) is in the traffic log;
- search equals a brute-force ranking of what survived: for sampled queries, the served top 10 has
  the scores of `bundle.form.reference_scores(Q, DocMatrix(X))` over every surviving document.

Each writer owns its ids (no two threads write one id), so the last acknowledged write of an id is
its expected state. Figures (kills, acknowledged writes, restart times, load sources, online
compactions) go to a JSON file; any violation stops the loop with the round, the id and what was found.

    python -m benchmarks.crash_loop --kills 50            # or scripts/crash-loop.sh --kills 50
"""

from __future__ import annotations

import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import numpy as np
import typer

from ssi.bundle import load_bundle, write_bundle
from ssi.forms import form_class
from ssi.records import Document
from ssi.traffic import EVENTS_FILE, read_events
from ssi.vocab import Vocabulary
from training.encoder import build_encoder

REPO = Path(__file__).resolve().parents[1]
API_KEY = "crash-loop-key-0123456789"
KEY = {"X-API-Key": API_KEY}


class CrashLoopFailure(AssertionError):
    """The server lost, resurrected or mis-ranked something: the message says what, where and when."""


@dataclass
class Config:
    work_dir: Path
    kills: int = 50
    writers: int = 4
    documents: int = 1500
    # A burst ends (the kill) once the writers have acknowledged a number of document puts drawn between these,
    # and at least one delete and one click; burst_timeout caps its seconds (a server that stops answering).
    burst_min_writes: int = 20
    burst_max_writes: int = 150
    burst_timeout: float = 120.0
    # Chance that a burst's kill is followed by a kill of the next start, at a random moment of its loading
    # (1.0: after every burst while kills remain).
    kill_while_loading: float = 0.15
    queries: int = 8  # brute-force ranking checks after each restart
    seed: int = 0
    snapshot_every_writes: int = 25
    compact_dead_fraction: float = 0.2
    workers: int = 1  # SSI_WORKERS: with more, the SIGKILL hits the supervisor and its workers die with it


@dataclass
class Round:
    number: int
    killed_while_loading: bool
    burst_target: int
    burst_seconds: float
    acked_puts: int
    acked_deletes: int
    acked_clicks: int
    uncertain: int
    restart_seconds: float
    loaded_from: str
    replayed_on_load: int
    compacted_on_load: bool
    documents: int
    rows: int


@dataclass
class Result:
    config: dict[str, Any]
    rounds: list[Round] = field(default_factory=list)
    kills: int = 0
    compactions: int = 0  # online compactions the server logged (each worker of a group logs its own)

    def summary(self) -> dict[str, Any]:
        restarts = [r.restart_seconds for r in self.rounds]
        return {
            "kills": self.kills,
            "kills_while_loading": sum(r.killed_while_loading for r in self.rounds),
            "restarts_checked": len(self.rounds),
            "acknowledged_puts": sum(r.acked_puts for r in self.rounds),
            "acknowledged_deletes": sum(r.acked_deletes for r in self.rounds),
            "acknowledged_clicks": sum(r.acked_clicks for r in self.rounds),
            "uncertain_at_kill": sum(r.uncertain for r in self.rounds),
            "lost": 0,  # any loss, resurrection or wrong ranking raises instead
            "resurrected": 0,
            "ranking_mismatches": 0,
            "restart_seconds_median": round(statistics.median(restarts), 3) if restarts else None,
            "restart_seconds_max": round(max(restarts), 3) if restarts else None,
            "burst_seconds_max": round(max(r.burst_seconds for r in self.rounds), 3) if self.rounds else None,
            "online_compactions": self.compactions,
            "compactions_on_load": sum(r.compacted_on_load for r in self.rounds),
            "loaded_from": {src: sum(r.loaded_from == src for r in self.rounds) for src in ("cache", "computed")},
        }


# -- the world: a generated corpus and a random bundle over its words -------------------------------


def _words(n: int, rng: np.random.Generator) -> list[str]:
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    found: set[str] = set()
    while len(found) < n:
        found.add(
            "".join(rng.choice(list(consonants)) + rng.choice(list(vowels)) for _ in range(int(rng.integers(2, 4))))
        )
    return sorted(found)


# The filter of the ranking check: a third of the documents (service.fields; its field is written with every one).
SHELF_FILTER = {"term": {"shelf": "s1"}}


def fields_for(serial: int) -> dict[str, Any]:
    """A document's fields: stored in the write's transaction and indexed, so they must survive every kill too."""
    return {"shelf": f"s{serial % 3}", "serial": serial}


def make_world(folder: Path, n_docs: int, seed: int) -> tuple[list[Document], Path, Path]:
    """A corpus of Zipf-distributed words (a unique word per document) and a random low-rank bundle."""
    rng = np.random.default_rng(seed)
    words = _words(2000 + n_docs, rng)
    common, unique = words[:2000], words[2000:]
    p = 1.0 / np.arange(1, 2001) ** 1.05
    p /= p.sum()
    docs = []
    for i in range(n_docs):
        body = [*rng.choice(common, size=int(rng.integers(15, 50)), p=p), unique[i]]
        title = " ".join(rng.choice(common[50:600], size=2))
        docs.append(Document(f"doc-{i:05d}", title, " ".join(body), fields=fields_for(i)))
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for doc in docs:
            handle.write(json.dumps({"id": doc.id, "title": doc.title, "text": doc.text, "fields": doc.fields}) + "\n")
    vocab = Vocabulary.build([d.full_text for d in docs], min_df=1)
    cls = form_class("lowrank")
    arrays = {
        name: (rng.standard_normal(shape) * 0.2).astype(np.float32)
        for name, shape in cls.shapes(16, vocab.size).items()
    }
    form = cls(arrays)
    bundle = folder / "bundle"
    write_bundle(bundle, form=form, vocab=vocab, encoder_onnx=build_encoder(form.query_map()))
    return docs, corpus, bundle


# -- the server -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`python -m service serve` in a subprocess, its output appended to one log file."""

    def __init__(self, config: Config, corpus: Path, bundle: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = config.work_dir / "server.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SSI_")},
            "SSI_HOST": "127.0.0.1",
            "SSI_PORT": str(self.port),
            "SSI_CACHE_DIR": str(config.work_dir / "cache"),
            "SSI_DATA_DIR": str(config.work_dir / "data"),
            "SSI_API_KEY": API_KEY,
            "SSI_THREADS": "1",
            "SSI_SNAPSHOT_EVERY_WRITES": str(config.snapshot_every_writes),
            "SSI_SNAPSHOT_INTERVAL": "0.2",
            "SSI_COMPACT_DEAD_FRACTION": str(config.compact_dead_fraction),
            "SSI_WORKERS": str(config.workers),
        }
        self.args = [sys.executable, "-m", "service", "serve", "--bundle", str(bundle), "--corpus", str(corpus)]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def wait_ready(self, timeout: float = 120.0) -> dict[str, Any]:
        """The documents collection's /readyz state once the server has loaded it."""
        info = self.poll_ready(timeout)
        if info is None:
            raise CrashLoopFailure(f"the index did not load within {timeout:.0f}s; see {self.log_path}")
        return info

    def poll_ready(self, seconds: float) -> dict[str, Any] | None:
        """Ask /readyz for up to `seconds`: the documents collection's state as soon as it answers 200, else None."""
        deadline = time.monotonic() + seconds
        # One client for the whole wait: httpx.get makes a client (and its TLS context) per call, some 40 ms of CPU
        # that the loading server needs. No keep-alive: every poll is a fresh connection, as a new client's is
        # (each worker of a group listens only once it has loaded).
        with httpx.Client(timeout=5, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            while True:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise CrashLoopFailure(
                        f"the server exited with {self.process.returncode} while loading; see {self.log_path}"
                    )
                try:
                    response = client.get(f"{self.url}/readyz")
                    if response.status_code == 200:
                        return response.json()["collections"]["documents"]
                except httpx.TransportError:
                    pass
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                time.sleep(min(0.05, left))

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


# -- writers ------------------------------------------------------------------------------------

Expected = dict[str, Document | None]  # id -> its document, or None once deleted


class Writer(threading.Thread):
    """Writes the ids it owns as fast as it can; remembers what was acknowledged and what was cut off."""

    def __init__(self, number: int, url: str, owned: Expected, vocabulary: list[str], rng: random.Random) -> None:
        super().__init__(daemon=True, name=f"writer-{number}")
        self.number, self.url, self.owned, self.vocabulary, self.rng = number, url, owned, vocabulary, rng
        self.stop = threading.Event()
        self.acked_puts = self.acked_deletes = 0
        # The write the kill may have cut off: id -> (state before, state it would set).
        self.in_flight: dict[str, tuple[Document | None, Document | None]] = {}
        # Writes answered 503 (turned away, or committed but not yet visible): checked like the cut-off one.
        self.uncertain: dict[str, tuple[Document | None, Document | None]] = {}
        self.serial = 0
        self.error: str | None = None

    def _text(self) -> str:
        return " ".join(self.rng.choice(self.vocabulary) for _ in range(self.rng.randint(8, 30)))

    def _new_doc(self, doc_id: str | None = None) -> Document:
        self.serial += 1
        doc_id = doc_id or f"w{self.number}-{self.serial}-{self.rng.randrange(1 << 30)}"
        return Document(doc_id, f"Title {self.serial}", self._text(), fields=fields_for(self.serial))

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                live = [d for d, doc in self.owned.items() if doc is not None and d not in self.uncertain]
                choice = self.rng.random()
                if choice < 0.35 or not live:
                    docs = [self._new_doc()]
                elif choice < 0.65:
                    docs = [self._new_doc(self.rng.choice(live))]
                elif choice < 0.8:
                    docs = [self._new_doc(), self._new_doc(self.rng.choice(live)), self._new_doc()]
                    docs = list({d.id: d for d in docs}.values())
                else:
                    victim = self.rng.choice(live)
                    self.in_flight = {victim: (self.owned.get(victim), None)}
                    try:
                        response = client.delete("/documents/" + quote(victim, safe=""), headers=KEY)
                    except httpx.TransportError:
                        return  # killed: the delete is cut off (in_flight)
                    self._answered(response.status_code, f"DELETE {victim!r}", response.text)
                    if response.status_code == 200:
                        self.owned[victim] = None
                        self.acked_deletes += 1
                    continue
                self.in_flight = {d.id: (self.owned.get(d.id), d) for d in docs}
                body = {"documents": [{"id": d.id, "title": d.title, "text": d.text, "fields": d.fields} for d in docs]}
                try:
                    response = client.post("/documents", json=body, headers=KEY)
                except httpx.TransportError:
                    return
                self._answered(response.status_code, "POST /documents", response.text)
                if response.status_code == 200:
                    for doc in docs:
                        self.owned[doc.id] = doc
                    self.acked_puts += len(docs)

    def _answered(self, status: int, what: str, text: str) -> None:
        if status == 503:
            self.uncertain.update(self.in_flight)
        elif status != 200:
            self.error = f"{what}: {status} {text[:200]}"
            self.stop.set()
        self.in_flight = {}


class Searcher(threading.Thread):
    """Searches during the burst (reads must keep working while writes and snapshots run) and clicks one hit of
    each answer: a click acknowledged before the kill must be in the traffic log after it."""

    def __init__(self, url: str, queries: list[str], rng: random.Random) -> None:
        super().__init__(daemon=True, name="searcher")
        self.url, self.queries, self.rng = url, queries, rng
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.acked_clicks: list[tuple[str, str]] = []  # (impression, clicked id)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            i = 0
            while not self.stop.is_set():
                i += 1
                try:
                    response = client.post("/search", json={"query": self.queries[i % len(self.queries)], "k": 10})
                    if response.status_code not in (200, 429, 503):
                        self.errors.append(f"{response.status_code} {response.text[:200]}")
                    if response.status_code != 200 or not response.json()["hits"]:
                        continue
                    answer = response.json()
                    clicked = self.rng.choice(answer["hits"])["id"]
                    click = client.post("/clicks", json={"impression": answer["impression"], "id": clicked})
                except httpx.TransportError:
                    return
                if click.status_code == 200:
                    self.acked_clicks.append((answer["impression"], clicked))
                elif click.status_code not in (429, 503):
                    self.errors.append(f"click: {click.status_code} {click.text[:200]}")


# -- checks -------------------------------------------------------------------------------------


def _resolve(
    client: httpx.Client, expected: Expected, uncertain: dict[str, tuple[Document | None, Document | None]], where: str
) -> None:
    """A write cut off by the kill must read as before or as after it; the expectation follows what is read."""
    for doc_id, (before, after) in uncertain.items():
        found = client.get("/documents/" + quote(doc_id, safe=""))
        now = _read(found)
        if found.status_code not in (200, 404) or now not in (before, after):
            raise CrashLoopFailure(f"{where}: {doc_id!r} reads {found.status_code} {now}, neither {before} nor {after}")
        expected[doc_id] = now


def _read(found: httpx.Response) -> Document | None:
    """The document a GET /documents/{id} answered (None: 404), fields included."""
    if found.status_code != 200:
        return None
    body = found.json()
    return Document(body["id"], body["title"], body["text"], fields=body.get("fields"))


def _check_clicks(events: Path, acked: list[tuple[str, str]], where: str) -> None:
    """Every acknowledged click is in the traffic log, as a click on the result its impression showed."""
    if not acked:
        return
    logged = {(r.impression, r.doc) for r in read_events(events) if r.clicked}
    lost = [pair for pair in acked if pair not in logged]
    if lost:
        raise CrashLoopFailure(
            f"{where}: {len(lost)} of {len(acked)} acknowledged clicks are not logged, e.g. {lost[0]}"
        )


def _check_documents(client: httpx.Client, expected: Expected, touched: set[str], where: str) -> None:
    for doc_id in sorted(touched):
        want = expected[doc_id]
        found = client.get("/documents/" + quote(doc_id, safe=""))
        if want is None:
            if found.status_code != 404:
                raise CrashLoopFailure(f"{where}: acknowledged delete of {doc_id!r} came back ({found.status_code})")
        elif found.status_code != 200:
            raise CrashLoopFailure(f"{where}: acknowledged write of {doc_id!r} lost ({found.status_code})")
        elif _read(found) != want:
            raise CrashLoopFailure(f"{where}: {doc_id!r} holds another version than the acknowledged one")


def _check_ranking(client: httpx.Client, bundle_dir: Path, expected: Expected, queries: list[str], where: str) -> None:
    """The served top 10 equals brute force of the form's reference score over every surviving document, and a
    filtered search's (SHELF_FILTER) over the surviving documents it matches: the field index after the restart
    agrees with the store.

    Same scores rank by rank (to 1e-4 relative); ids may differ only where brute force has a tie.
    """
    bundle = load_bundle(bundle_dir, mmap=False)
    docs = [doc for doc in expected.values() if doc is not None]
    position = {doc.id: i for i, doc in enumerate(docs)}
    X = bundle.vocab.featurize_documents([doc.full_text for doc in docs])
    Q = bundle.vocab.featurize_queries(queries)
    scores = np.asarray(bundle.form.reference_scores(Q, bundle.vocab.doc_matrix(X)), dtype=np.float64)
    shelf = next(iter(SHELF_FILTER["term"].values()))
    outside = np.asarray([(doc.fields or {}).get("shelf") != shelf for doc in docs], dtype=bool)
    for qi, filtered in ((qi, filtered) for qi in range(len(queries)) for filtered in (False, True)):
        query = queries[qi]
        asked: dict[str, Any] = {"query": query, "k": 10, **({"filter": SHELF_FILTER} if filtered else {})}
        response = client.post("/search", json=asked)
        if response.status_code != 200:
            raise CrashLoopFailure(f"{where}: search answered {response.status_code}: {response.text[:200]}")
        if Q[qi].nnz == 0:  # no known word: the service answers nothing, brute force ranks all at 0
            continue
        hits = response.json()["hits"]
        f = np.where(outside, -np.inf, scores[qi]) if filtered else scores[qi]
        if filtered and response.json()["matched"] != int((~outside).sum()):
            raise CrashLoopFailure(f"{where}: {response.json()['matched']} match the filter, {(~outside).sum()} do")
        best = [row for row in np.lexsort((np.arange(f.shape[0]), -f))[:10].tolist() if np.isfinite(f[row])]
        scale = max(1.0, float(np.abs(f[best]).max(initial=0.0)))
        if len(hits) != len(best):
            raise CrashLoopFailure(f"{where}: query {query!r}: {len(hits)} hits, brute force has {len(best)}")
        for rank, (hit, row) in enumerate(zip(hits, best, strict=True)):
            if hit["id"] not in position:
                raise CrashLoopFailure(f"{where}: query {query!r} returned {hit['id']!r}, which should not exist")
            true_score = f[position[hit["id"]]]
            if abs(true_score - f[row]) > 1e-4 * scale or abs(hit["score"] - f[row]) > 1e-4 * scale:
                raise CrashLoopFailure(
                    f"{where}: query {query!r} rank {rank}: served {hit['id']!r} ({hit['score']:.5f}), "
                    f"brute force {docs[row].id!r} ({f[row]:.5f})"
                )


# -- the loop -----------------------------------------------------------------------------------


def run_crash_loop(
    config: Config, *, docs: list[Document], corpus: Path, bundle: Path, log: Callable[[str], None] = print
) -> Result:
    """SIGKILL, restart and check until `config.kills` kills; raises `CrashLoopFailure` at the first violation."""
    rng = random.Random(config.seed)
    expected: Expected = {doc.id: doc for doc in docs}
    vocabulary = sorted({word for doc in docs for word in doc.text.split()})
    owned: list[Expected] = [{} for _ in range(config.writers)]
    for doc in docs:
        owned[_owner(doc.id, config.writers)][doc.id] = doc
    touched: set[str] = set()  # ids written at least once through the API: checked after every restart
    acked_clicks: list[tuple[str, str]] = []  # every click acknowledged so far: checked after every restart
    result = Result(config={k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()})
    server = Server(config, corpus, bundle)
    started = time.perf_counter()
    server.start()
    info = server.wait_ready()
    loading = time.perf_counter() - started  # the last start-up's seconds: a kill while loading lands within them
    log(f"first start: {info['documents']} documents from {info['loaded_from']} in {loading:.1f}s")
    kills = 0
    try:
        while kills < config.kills:
            number = len(result.rounds) + 1
            writers = [
                Writer(w, server.url, owned[w], vocabulary, random.Random(rng.random())) for w in range(config.writers)
            ]
            searcher = Searcher(
                server.url, [" ".join(rng.sample(vocabulary, 3)) for _ in range(20)], random.Random(rng.random())
            )
            for thread in [*writers, searcher]:
                thread.start()
            target = rng.randint(config.burst_min_writes, config.burst_max_writes)
            burst = _burst(server, writers, searcher, target, config.burst_timeout, log)
            server.kill()
            kills += 1
            for thread in [*writers, searcher]:
                thread.stop.set()
                thread.join(timeout=60)
            errors = [w.error for w in writers if w.error] + searcher.errors
            if errors:
                raise CrashLoopFailure(f"round {number}: a request failed before the kill: {errors[0]}")
            uncertain: dict[str, tuple[Document | None, Document | None]] = {}
            for writer in writers:
                uncertain.update(writer.uncertain)
                uncertain.update(writer.in_flight)
                for doc_id, doc in writer.owned.items():
                    if expected.get(doc_id) is not doc:
                        touched.add(doc_id)
                    expected[doc_id] = doc
            touched.update(uncertain)
            while_loading = kills < config.kills and rng.random() < config.kill_while_loading
            if while_loading:  # the next start is killed too, at a random moment of a start-up as long as the last,
                server.start()  # or as it becomes ready if that comes first (its post-load snapshot and log trim)
                server.poll_ready(rng.uniform(0.05, 1.0) * loading)
                server.kill()
                kills += 1
            started = time.perf_counter()
            server.start()
            info = server.wait_ready()
            restart = loading = time.perf_counter() - started
            where = f"round {number}"
            with httpx.Client(base_url=server.url, timeout=60) as client:
                _resolve(client, expected, uncertain, where)
                for doc_id in uncertain:
                    owned[_owner(doc_id, config.writers)][doc_id] = expected[doc_id]
                _check_documents(client, expected, touched, where)
                live = sum(doc is not None for doc in expected.values())
                if info["documents"] != live:
                    raise CrashLoopFailure(f"{where}: the index holds {info['documents']} documents, the store {live}")
                recent = [doc for doc in (expected[d] for d in sorted(touched)) if doc is not None]
                sample = rng.sample(recent, min(config.queries // 2, len(recent)))
                sample += rng.sample([d for d in expected.values() if d is not None], config.queries - len(sample))
                queries = [" ".join(doc.text.split()[:6]) for doc in sample]
                _check_ranking(client, bundle, expected, queries, where)
            acked_clicks += searcher.acked_clicks
            _check_clicks(config.work_dir / "data" / "stores" / "documents" / EVENTS_FILE, acked_clicks, where)
            round_ = Round(
                number=number,
                killed_while_loading=while_loading,
                burst_target=target,
                burst_seconds=round(burst, 3),
                acked_puts=sum(w.acked_puts for w in writers),
                acked_deletes=sum(w.acked_deletes for w in writers),
                acked_clicks=len(searcher.acked_clicks),
                uncertain=len(uncertain),
                restart_seconds=round(restart, 3),
                loaded_from=info["loaded_from"],
                replayed_on_load=info["replayed_on_load"],
                compacted_on_load=info["compacted_on_load"],
                documents=info["documents"],
                rows=info["rows"],
            )
            result.rounds.append(round_)
            log(
                f"kill {kills}/{config.kills}{' (+1 while loading)' if while_loading else ''}: "
                f"{round_.acked_puts} puts + {round_.acked_deletes} deletes + {round_.acked_clicks} clicks "
                f"acknowledged in {burst:.2f}s, {round_.uncertain} cut off; "
                f"restart {restart:.2f}s from {round_.loaded_from} (replayed {round_.replayed_on_load}); "
                f"{round_.documents} documents in {round_.rows} rows, all as acknowledged; ranking exact"
            )
    finally:
        server.stop()
    result.kills = kills
    result.compactions = server.log_path.read_text(encoding="utf-8", errors="replace").count("compacted online")
    return result


def _burst(
    server: Server, writers: list[Writer], searcher: Searcher, target: int, timeout: float, log: Callable[[str], None]
) -> float:
    """Wait until the writers have acknowledged `target` puts, one delete and one click (or a request failed, or
    `timeout` passed); returns the burst's seconds. The kill then lands within a few milliseconds of that."""
    started = time.perf_counter()
    while True:
        seconds = time.perf_counter() - started
        puts, deletes = sum(w.acked_puts for w in writers), sum(w.acked_deletes for w in writers)
        if puts >= target and deletes >= 1 and searcher.acked_clicks:
            return seconds
        if any(w.error for w in writers) or searcher.errors:
            return seconds  # reported after the kill
        assert server.process is not None
        if server.process.poll() is not None:
            raise CrashLoopFailure(
                f"the server exited on its own ({server.process.returncode}) during a burst; see {server.log_path}"
            )
        if seconds > timeout:
            clicks = len(searcher.acked_clicks)
            log(
                f"burst cut at {timeout:.0f}s: {puts} of {target} puts, {deletes} deletes, {clicks} clicks acknowledged"
            )
            return seconds
        time.sleep(0.002)


def _owner(doc_id: str, writers: int) -> int:
    """Which writer owns an id: corpus ids by position, written ids by their `w<writer>-` prefix."""
    if doc_id.startswith("w") and "-" in doc_id:
        return int(doc_id[1 : doc_id.index("-")])
    return int(doc_id.removeprefix("doc-")) % writers


def main(
    kills: Annotated[int, typer.Option(help="SIGKILLs (each followed by a restart and the checks)")] = 50,
    writers: Annotated[int, typer.Option(help="Concurrent writing clients")] = 4,
    workers: Annotated[int, typer.Option(help="SSI_WORKERS of the server (its processes)", min=1)] = 1,
    documents: Annotated[int, typer.Option(help="Documents of the generated corpus")] = 1500,
    burst_min_writes: Annotated[int, typer.Option(help="Fewest acknowledged puts of a burst before its kill")] = 20,
    burst_max_writes: Annotated[int, typer.Option(help="Most acknowledged puts of a burst before its kill")] = 150,
    burst_timeout: Annotated[float, typer.Option(help="Longest burst (s), whatever was acknowledged")] = 120.0,
    kill_while_loading: Annotated[
        float, typer.Option(help="Chance that a burst's kill is followed by one during the next start-up", min=0, max=1)
    ] = 0.15,
    seed: Annotated[int, typer.Option(help="Random seed (corpus, bundle, kill times, writes)")] = 0,
    work_dir: Annotated[Path | None, typer.Option(help="Store, cache and server log (default: a temp folder)")] = None,
    out: Annotated[Path, typer.Option(help="JSON result")] = Path("bench-results/crash-loop.json"),
) -> None:
    """SIGKILL the real server during write bursts, restart, and check that nothing acknowledged was lost."""
    if not 1 <= burst_min_writes <= burst_max_writes:
        raise typer.BadParameter("--burst-min-writes must be at least 1 and at most --burst-max-writes")
    folder = work_dir or Path(tempfile.mkdtemp(prefix="ssi-crash-loop-"))
    config = Config(
        work_dir=folder,
        kills=kills,
        writers=writers,
        workers=workers,
        documents=documents,
        burst_min_writes=burst_min_writes,
        burst_max_writes=burst_max_writes,
        burst_timeout=burst_timeout,
        kill_while_loading=kill_while_loading,
        seed=seed,
    )
    docs, corpus, bundle = make_world(folder / "world", documents, seed)
    started = time.perf_counter()
    try:
        result = run_crash_loop(
            config, docs=docs, corpus=corpus, bundle=bundle, log=lambda line: typer.echo(line, err=True)
        )
    except CrashLoopFailure as exc:
        typer.echo(f"crash loop FAILED: {exc}", err=True)
        raise typer.Exit(1) from None
    summary = {**result.summary(), "seconds": round(time.perf_counter() - started, 1)}
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "summary": summary,
        "config": result.config,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "rounds": [asdict(r) for r in result.rounds],
    }
    out.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    typer.echo(json.dumps(summary, indent=2))
    typer.echo(f"written to {out}; server log in {folder / 'server.log'}", err=True)


if __name__ == "__main__":
    typer.run(main)
