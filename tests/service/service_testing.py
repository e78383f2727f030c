"""Helpers for the service tests: a generated corpus, a random bundle of any form, a brute-force oracle, real servers.

Servers are real uvicorn servers on loopback ports, either in a thread of the test process (fast,
for most tests) or as a subprocess running `python -m service serve` (for restarts and SIGKILL).
(A module with its own name, not conftest, so that the tests' imports cannot pick up another conftest.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
import scipy.sparse as sp

from service.server import http_protocol
from service.settings import Settings
from ssi.bundle import load_bundle, write_bundle
from ssi.forms import DocumentKeys, Form, form_class
from ssi.hybrid import sentence_scores
from ssi.keywords import keyword_query
from ssi.open_vocab import CollectionStatistics, OpenRule, build_postings, collection_statistics, open_scores
from ssi.products import DocMatrix
from ssi.records import Document
from ssi.sentence import SentenceEncoder, read_spec, write_spec
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25
from training.dice import HashingPlan
from training.encoder import form_encoder
from training.sentence_projection import add_projection

API_KEY = "test-key-0123456789abcdef"
CUT_DIMS = 8  # the `cut` bundle of `hybrid_world`: the tiny encoder's 32 dimensions cut to these
REPO = Path(__file__).resolve().parents[2]

# The one TLS context of every client the tests make (`verify=TLS`): httpx builds one per client otherwise, loading
# certifi's CA bundle each time (~60 ms of CPU), though every URL here is plain HTTP on loopback: two clients a server
# start (its readiness poll and a ThreadServer's own), and some tests open a client per request.
TLS = httpx.create_ssl_context()

# Ids that break naive routing: reserved URL characters, a slash, spaces, non-ASCII.
ODD_IDS = ["C++", "Football_(soccer)", "Áedán_mac_Gabráin", "a/b", "x y", "100%", "?q=1#frag", "東京", "semi;colon"]


def syllable_words(n: int, rng: np.random.Generator) -> list[str]:
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < n:
        length = int(rng.integers(2, 4))
        words.add("".join(rng.choice(list(consonants)) + rng.choice(list(vowels)) for _ in range(length)))
    return sorted(words)


def make_corpus(n_docs: int = 400, seed: int = 0, vocab_words: int = 1500) -> list[Document]:
    """Zipf-distributed words; each doc also gets a word that occurs in no other doc (a "needle")."""
    rng = np.random.default_rng(seed)
    words = syllable_words(vocab_words + n_docs, rng)
    common, needles = words[:vocab_words], words[vocab_words:]
    weights = 1.0 / np.arange(1, vocab_words + 1) ** 1.05
    weights /= weights.sum()
    docs = []
    for i in range(n_docs):
        body = list(rng.choice(common, size=int(rng.integers(15, 60)), p=weights))
        body.insert(int(rng.integers(0, len(body))), needles[i])
        title = " ".join(rng.choice(common[50:600], size=int(rng.integers(1, 4))))
        doc_id = ODD_IDS[i] if i < len(ODD_IDS) else f"doc-{i:05d}"
        docs.append(Document(id=doc_id, title=title.capitalize(), text=" ".join(body) + "."))
    return docs


def needle_of(doc: Document) -> str:
    """The word of `doc` that no other generated document contains (inserted by make_corpus)."""
    counts: dict[str, int] = {}
    for word in doc.text.rstrip(".").split():
        counts[word] = counts.get(word, 0) + 1
    return min(counts, key=lambda w: (len(w) < 4, counts[w]))


def probe_queries(docs: list[Document], n: int, seed: int) -> list[str]:
    """For n random documents: a 5-word keyword query (the protocol's sampler), its rare word alone, and
    that rare word among common ones — the cases where the semantic part, the diagonal part or both decide."""
    rng = np.random.default_rng(seed)
    queries = []
    for i in rng.choice(len(docs), size=n, replace=False).tolist():
        needle = needle_of(docs[i])
        queries += [keyword_query(docs[i].text, 5, seed, docs[i].id), needle, f"{needle} {docs[i - 1].title}"]
    return queries


def write_corpus(path: Path, docs: list[Document]) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for doc in docs:
            line = {"id": doc.id, "title": doc.title, "text": doc.text}
            if doc.fields:  # filterable values (service.fields)
                line["fields"] = doc.fields
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def write_adverts(path: Path, docs: list[Document]) -> Path:
    """The documents as an adverts corpus (`ssi serve`'s adverts lines), document i in category cat<i mod 3>."""
    with path.open("w", encoding="utf-8") as handle:
        for i, doc in enumerate(docs):
            line = {"id": doc.id, "title": doc.title, "text": doc.text, "category": f"cat{i % 3}"}
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def process_world(root: Path, n_docs: int, seed: int, vocab_words: int = 3000, n_dims: int = 32) -> dict:
    """A generated corpus file and a bundle trained on it under `root`, for tests that start real servers."""
    docs = make_corpus(n_docs, seed=seed, vocab_words=vocab_words)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundle = make_bundle(root / "bundle", docs, n_dims=n_dims)
    return {"root": root, "docs": docs, "corpus": corpus, "bundle": bundle}


def random_form(
    form: str,
    n_dims: int,
    vocab_size: int,
    *,
    seed: int = 1,
    scale: float = 0.2,
    scales: dict[str, float] | None = None,
    keys: DocumentKeys | None = None,
    hashed: int = 1,
) -> Form:
    """The form `form` with random float32 arrays of its declared shapes (`scales` overrides `scale` per array).

    A diagonal's weights are drawn positive (a learned re-weighting of words), the other arrays are normal.
    A keyed form (per-document vectors) holds one for each of `keys`' documents.
    """
    cls = form_class(form)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    sizes = {"H": 4 * vocab_size, "T": len(keys) if keys is not None else 0, "F": hashed}
    for name, shape in cls.shapes(n_dims, vocab_size, **sizes).items():
        if form == "diagonal":
            array = rng.uniform(0.2, 3.0, shape)
        else:
            array = rng.standard_normal(shape) * (scales or {}).get(name, scale)
        arrays[name] = array.astype(np.float32)
    return cls(arrays, keys or DocumentKeys((), ())) if cls.keyed else cls(arrays)


def make_bundle(
    path: Path,
    docs: list[Document],
    *,
    form: str = "lowrank",
    n_dims: int = 16,
    seed: int = 1,
    scale: float = 0.2,
    scales: dict[str, float] | None = None,
    lexical: str = "tfidf",
    stemmer: str | None = None,
    sentence: Path | None = None,
) -> Path:
    """A bundle of `form` with random arrays over the corpus vocabulary (every word kept, so needles are searchable).
    `sentence`: a sentence encoder's folder with its λ (training.sentence_export): a hybrid bundle.

    A keyed form (halftrans) gets a free vector for every other document: the rest fall back to its functional map.
    `lexical`: the vocabulary's weighting, "tfidf" or "bm25" (ssi.weighting); `stemmer`: ssi.stemming's.
    """
    bm25 = Bm25() if lexical == "bm25" else None
    vocab = Vocabulary.build([d.full_text for d in docs], min_df=1, bm25=bm25, stemmer=stemmer)
    if form == "cfh":  # correlated feature hashing: its DICE map counted on the corpus, onto the top quarter
        vocab = HashingPlan(vocab.n_words // 4, k=3, min_df=1).build([tokenize(d.full_text) for d in docs], vocab)
    known = docs[::2]
    keys = DocumentKeys.of([d.id for d in known], vocab.featurize_documents([d.full_text for d in known]))
    hashed = vocab.hashing.n_frequent if vocab.hashing is not None else 1
    model = random_form(form, n_dims, vocab.size, seed=seed, scale=scale, scales=scales, keys=keys, hashed=hashed)
    encoder = form_encoder(model) if model.served_exactly else None  # hash kernels have none
    write_bundle(path, form=model, vocab=vocab, encoder_onnx=encoder, sentence=sentence)
    return path


def make_sentence_encoder(factory: pytest.TempPathFactory, root: Path, name: str, weight: float, seed: int = 0) -> Path:
    """`root/name`: the run's tiny random BERT of `seed` as exported and checked by the trainer's own code
    (tests/training/sentence_testing.py's exported_tiny_encoder: once per run, shared by every worker), copied with
    λ = `weight`: what `make_bundle(sentence=...)` takes."""
    from tests.training.sentence_testing import exported_tiny_encoder

    folder = root / name
    shutil.copytree(exported_tiny_encoder(factory, seed=seed).sentence, folder, copy_function=shutil.copyfile)
    write_spec(folder, read_spec(folder).with_weight(weight, "test"))
    return folder


def hybrid_world(factory: pytest.TempPathFactory, name: str, n_docs: int, weight: float) -> dict:
    """A new folder `name` with a generated corpus file, a hybrid BM25 bundle over it (the run's tiny encoder at
    λ = `weight`), its `plain` twin without the encoder (the same vocabulary and random form) and its `cut` twin with
    the encoder's vectors cut to CUT_DIMS (`ssi train --sentence-dims`, fitted on the corpus)."""
    root = factory.mktemp(name)
    docs = make_corpus(n_docs, seed=5, vocab_words=300)
    encoder = make_sentence_encoder(factory, root, "sentence", weight)
    bundle = make_bundle(root / "bundle", docs, n_dims=8, seed=2, lexical="bm25", sentence=encoder)
    plain = make_bundle(root / "plain", docs, n_dims=8, seed=2, lexical="bm25")
    cut = shutil.copytree(encoder, root / "sentence-cut", copy_function=shutil.copyfile)
    add_projection(cut, [d.full_text for d in docs], CUT_DIMS)
    cut_bundle = make_bundle(root / "cut", docs, n_dims=8, seed=2, lexical="bm25", sentence=cut)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    return {"root": root, "docs": docs, "corpus": corpus, "bundle": bundle, "plain": plain, "cut": cut_bundle}


@dataclass
class Oracle:
    """Brute force over the whole collection: the bundle's form's reference score f(q, d) for every document;
    with `open_vocab` (as SSI_OPEN_VOCAB, on unless told), plus the open vocabulary's term."""

    bundle_dir: Path
    docs: list[Document]
    open_vocab: bool = Settings.model_fields["open_vocab"].default
    # With the open vocabulary, "collection" (SSI_OPEN_VOCAB_STATISTICS): every word's idf from these documents and
    # `avg_len`, the service's (the documents' its index was computed from), or these documents' own where None.
    statistics: str = "bundle"
    avg_len: float | None = None
    query_graph: str = "query"

    def __post_init__(self) -> None:
        self.bundle = load_bundle(self.bundle_dir, mmap=False)
        self.form = self.bundle.form
        self.ids = [d.id for d in self.docs]
        vocab = self.bundle.vocab
        texts = [d.full_text for d in self.docs]
        X = vocab.featurize_documents(texts)
        self.collection: CollectionStatistics | None = None
        if self.open_vocab and self.statistics == "collection":
            stats = collection_statistics(vocab, X, np.array([len(tokenize(t)) for t in texts], dtype=np.int64))
            self.collection = stats if self.avg_len is None else stats.with_avg_len(self.avg_len)
            # lexical rows at the collection's avg_len, semantic rows the bundle's; keyed forms use their own vectors
            lexical = self.collection.vocabulary(vocab).featurize_documents(texts)
            self.doc_matrix = DocMatrix(lexical, ids=self.ids, semantic=vocab.semantic_rows(X))
        else:
            self.doc_matrix = vocab.doc_matrix(X, ids=self.ids)  # a keyed form's training documents: own vectors
        # The open vocabulary's term (ssi.open_vocab): the documents' words the bundle lacks, live statistics.
        bm25 = None if self.collection is None else self.collection.bm25
        self.open_rule = OpenRule.of(vocab, self.form, bm25) if self.open_vocab else None
        self.open = None
        if self.open_rule is not None:
            self.open = build_postings(self.open_rule, [tokenize(d.full_text) for d in self.docs])
        self._embedded: np.ndarray | None = None
        # A hybrid bundle's third part (ssi.hybrid): its encoder and every document's e(d), and what encodes a query:
        # its query graph where it has one and `query_graph` (as SSI_QUERY_GRAPH) says so, else the encoder.
        self.sentence = SentenceEncoder(self.bundle.sentence_path) if self.bundle.sentence is not None else None
        self.doc_sentences = self.sentence.encode(texts) if self.sentence is not None else None
        self.query_sentence = self.sentence
        if self.bundle.sentence is not None and self.bundle.sentence.query is not None and self.query_graph == "query":
            self.query_sentence = SentenceEncoder(self.bundle.sentence_path, part="query")

    def featurize(self, query: str) -> sp.csr_matrix:
        return self.bundle.vocab.featurize_queries([query])

    def scores(self, query: str) -> np.ndarray:
        """f(q, d) of every document, as the form defines it (plus the open vocabulary's term if asked), float64."""
        q = self.featurize(query)
        f = self.form.reference_scores(q, self.doc_matrix)[0].astype(np.float64)
        if self.collection is not None:  # the lexical part with the collection's idf
            change = self.collection.lexical_scores_change(self.bundle.vocab, self.form, q, self.doc_matrix)
            if change is not None:
                f = f + change[0]
        if self.open_rule is not None and self.open is not None:
            extra = open_scores(self.open_rule, self.open, [tokenize(query)], len(self.docs), len(self.docs))
            if extra is not None:
                f = f + extra[0]
        if self.query_sentence is not None and self.bundle.sentence is not None:
            weight = self.bundle.sentence.weight
            f = f + sentence_scores(self.query_sentence.encode([query]), self.doc_sentences, weight)[0]
        return f

    def top(
        self, query: str, k: int, exclude: str | None = None, among: set[str] | None = None
    ) -> tuple[list[str], np.ndarray]:
        """The k best documents (ties by collection order), leaving out `exclude` (the query document of /similar);
        with `among`, of those documents only (the ones a filter matches, service.fields)."""
        f = self.scores(query)
        ranked = np.lexsort((np.arange(f.shape[0]), -f)).tolist()
        order = [i for i in ranked if self.ids[i] != exclude and (among is None or self.ids[i] in among)][:k]
        return [self.ids[i] for i in order], f[order]

    def semantic_rank(self, query: str, doc_id: str) -> int:
        """Where the embedding index alone ranks `doc_id` (its score embed_queries(q)·embed(d), not f)."""
        if self._embedded is None:
            self._embedded = self.form.embed_documents_of(self.doc_matrix.S, self.ids).astype(np.float64)
        q = self.featurize(query)
        semantic = self._embedded @ self.form.embed_queries(q).astype(np.float64).ravel()
        return int((semantic > semantic[self.ids.index(doc_id)]).sum())


def assert_same_ranking(
    hits: list[dict], oracle: Oracle, query: str, k: int, exclude: str | None = None, among: set[str] | None = None
) -> None:
    """The service's hits are the brute-force top k (of the documents `among`, when given): same ids in order,
    except where scores tie."""
    ids, top_scores = oracle.top(query, k, exclude, among)
    f = oracle.scores(query)
    scale = max(1.0, float(np.abs(top_scores).max(initial=0.0)))
    assert len(hits) == len(ids), (query, len(hits), len(ids))
    for position, (hit, expected_id, expected_score) in enumerate(zip(hits, ids, top_scores, strict=True)):
        assert hit["score"] == pytest.approx(expected_score, abs=1e-4 * scale), (query, position)
        sentence = hit.get("sentence")  # a /search hit's third part; /match's hits have none
        parts = hit["semantic"] + hit["lexical"] + (sentence or 0.0)
        assert parts == pytest.approx(hit["score"], abs=(1e-6 if sentence is None else 1e-5) * scale)
        assert sentence is None or oracle.sentence is not None
        if hit["id"] != expected_id:  # only a tie may swap two documents
            assert f[oracle.ids.index(hit["id"])] == pytest.approx(expected_score, abs=1e-5 * scale), (query, position)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def polling_client(timeout: float = 30.0) -> httpx.Client:
    """One client for a loop of requests to a server: `httpx.get` builds a client (and its TLS context) per call,
    ~40 ms of CPU each, taken from the server a test waits on. No keep-alive: each request opens a connection of
    its own, as a new client does, so any worker of a group may take it."""
    return httpx.Client(timeout=timeout, limits=httpx.Limits(max_keepalive_connections=0), verify=TLS)


def wait_ready(base_url: str, timeout: float = 60.0, process: subprocess.Popen | None = None) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    with polling_client() as client:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}")
            try:
                response = client.get(f"{base_url}/readyz", timeout=5)
                try:
                    last = response.json()
                except ValueError:  # not our answer yet: a Ray Serve proxy whose routes have not caught up (a 404)
                    last = {"status": response.status_code, "body": response.text[:200]}
                    time.sleep(0.05)
                    continue
                if response.status_code == 200:
                    return last
                if last.get("status") == "failed":
                    raise RuntimeError(f"server failed to load: {last}")
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise TimeoutError(f"server not ready after {timeout}s: {last}")


def worker_pids(base_url: str, workers: int, timeout: float = 60.0) -> set[int]:
    """The pids answering /readyz on fresh connections, asked until `workers` of them answered or `timeout` passed.

    The kernel spreads new connections over the workers' SO_REUSEPORT sockets by a hash of the client's address,
    and a worker binds its socket only after it loaded: a fixed number of tries right after start-up saw one worker
    of two on a loaded machine."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    with polling_client() as client:
        while len(seen) < workers and time.monotonic() < deadline:
            seen.add(client.get(f"{base_url}/readyz", timeout=30).json()["pid"])
    return seen


class ThreadServer:
    """The app under a real uvicorn server in a thread of the test process."""

    def __init__(self, **settings: object) -> None:
        import uvicorn

        from service.app import create_app

        self.port = free_port()
        self.settings = Settings(host="127.0.0.1", port=self.port, **settings)
        self.app = create_app(self.settings)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            http=http_protocol(self.settings),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        self.ready = wait_ready(self.url)
        self.client = httpx.Client(base_url=self.url, timeout=30, verify=TLS)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)


class ProcessServer:
    """`python -m service serve` (or another `command`, e.g. the `ssi` script) in a subprocess, its log in a file."""

    def __init__(
        self, workdir: Path, env: dict[str, str | None], args: list[str], command: list[str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        # One process unless the test says otherwise (None in `env` unsets a variable): `ssi serve` alone sizes
        # its workers by the machine's cores, and a test of one process must not depend on the cores.
        merged = {"SSI_WORKERS": "1", **os.environ, **env, "SSI_PORT": str(self.port), "SSI_HOST": "127.0.0.1"}
        self.env = {name: value for name, value in merged.items() if value is not None}
        self.args = [*(command or [sys.executable, "-m", "service", "serve"]), *args]
        self.process: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> ProcessServer:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        log.close()
        if wait:
            try:
                self.ready = wait_ready(self.url, process=self.process)
            except Exception:
                self.stop()
                raise RuntimeError(f"server did not start; log:\n{self.log()}") from None
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
