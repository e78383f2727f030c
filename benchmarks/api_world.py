"""A generated collection for the HTTP benchmarks and the API fuzzer: a corpus file, a random bundle, a server.

The words are syllables drawn with a Zipf law, so a query shares words with many documents as real
text does; the bundle is a `lowrank` form with random arrays over the corpus vocabulary (ranking
quality is not what these benchmarks look at, the cost of a request is). The server is
`python -m service serve` in a subprocess, started from any checkout (`repo`), so a measurement can
be repeated on an older version of the code.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from ssi.bundle import write_bundle
from ssi.forms import form_class
from ssi.vocab import Vocabulary
from training.encoder import build_encoder

REPO = Path(__file__).resolve().parents[1]


def syllable_words(n: int, rng: np.random.Generator) -> list[str]:
    consonants, vowels = list("bdfgklmnprstvz"), list("aeiou")
    words: set[str] = set()
    while len(words) < n:
        length = int(rng.integers(2, 5))
        words.add("".join(str(rng.choice(consonants)) + str(rng.choice(vowels)) for _ in range(length)))
    return sorted(words)


def world_fields(i: int, rng: np.random.Generator) -> dict[str, Any]:
    """Document i's fields (service.fields), one of each type, so that the published schema offers filters,
    facets and their examples over them and the fuzzer sends those."""
    return {
        "category": ["books", "music", "games"][i % 3],
        "tags": [f"t{int(t)}" for t in rng.integers(0, 5, size=int(rng.integers(0, 3)))],
        "price": round(float(rng.uniform(1, 100)), 2),
        "year": 1990 + i % 30,
        "published": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
        "in_stock": bool(i % 2),
    }


def write_world(
    root: Path,
    n_docs: int = 300,
    words_per_doc: tuple[int, int] = (15, 60),
    seed: int = 0,
    fields: bool = False,
) -> World:
    """`root/corpus.jsonl` and `root/bundles/current` (a lowrank bundle, N = 16, every word kept); with `fields`,
    each document carries world_fields."""
    rng = np.random.default_rng(seed)
    words = syllable_words(3000, rng)
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    weights /= weights.sum()
    root.mkdir(parents=True, exist_ok=True)
    corpus = root / "corpus.jsonl"
    texts = []
    with corpus.open("w", encoding="utf-8") as handle:
        for i in range(n_docs):
            text = " ".join(rng.choice(words, size=int(rng.integers(*words_per_doc)), p=weights)) + "."
            title = " ".join(rng.choice(words[50:600], size=3)).capitalize()
            texts.append(f"{title}\n{text}")
            record: dict[str, Any] = {"id": f"doc-{i:05d}", "title": title, "text": text}
            if fields:
                record["fields"] = world_fields(i, rng)
            handle.write(json.dumps(record) + "\n")
    vocab = Vocabulary.build(texts, min_df=1)
    cls = form_class("lowrank")
    arrays = {
        name: (rng.standard_normal(shape) * 0.2).astype(np.float32)
        for name, shape in cls.shapes(16, vocab.size).items()
    }
    form = cls(arrays)
    bundle = root / "bundles" / "current"
    write_bundle(bundle, form=form, vocab=vocab, encoder_onnx=build_encoder(form.query_map()))
    return World(root=root, corpus=corpus, bundle=bundle, words=words)


@dataclass
class World:
    root: Path
    corpus: Path
    bundle: Path
    words: list[str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`python -m service serve` over a world, from the checkout `repo`, its log in `root/server-PORT.log`."""

    def __init__(self, world: World, env: dict[str, str] | None = None, repo: Path = REPO) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.repo = repo
        self.log_path = world.root / f"server-{self.port}.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SSI_")},
            "SSI_BUNDLE": str(world.bundle),
            "SSI_CORPUS": str(world.corpus),
            "SSI_CACHE_DIR": str(world.root / f"cache-{self.port}"),
            "SSI_HOST": "127.0.0.1",
            "SSI_PORT": str(self.port),
            "SSI_LOG_LEVEL": "warning",
            "SSI_WORKERS": "1",  # one process, whatever the cores (`ssi serve` alone sizes its workers by them)
            "PYTHONPATH": str(repo),
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "service", "serve"], env=self.env, cwd=self.repo, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 120
        with httpx.Client() as client:  # one client: httpx.get builds one (and its TLS context) per poll
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited:\n{self.log_path.read_text(errors='replace')}")
                try:
                    if client.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        self.__exit__()
        raise TimeoutError(f"server not ready:\n{self.log_path.read_text(errors='replace')}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def rss_mb(self) -> float:
        """The server's resident memory now (Linux /proc)."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def peak_rss_mb(self) -> float:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")
