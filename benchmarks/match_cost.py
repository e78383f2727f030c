"""The cost of matching a page to adverts: POST /match over HTTP against hash kernels scoring the same pairs.

The SSI paper's point (section 4.3): with V d cached for every advert and U q computed once per
page, a (page, advert) score costs N multiplications, where a hash kernel needs |q|·|d| hashed
pairs. This benchmark serves `--ads` generated adverts (6 to 12 Zipf-drawn words each) in an
adverts collection with a lowrank bundle (N = `--dims`, random arrays: the cost, not the ranking,
is measured), sends one `--page-kb` kB page to `POST /match` (k = 10) for `--seconds`, one request
at a time, and reports throughput and p50/p99. In the same process it times the two scorings of
that page against every advert: SSI's (U q, then the cached V d block times it, plus q·d; and the
semantic part alone, the N multiplications per advert) and the hash kernel's (ssi/forms/hashkernel.py
`reference_scores`, H = 2²⁰, which sums |q| windows of W into one D-vector per page, then makes one
pass over the adverts' words), and reports their ratios.

    python -m benchmarks.match_cost --ads 100000 --seconds 30 --out bench-results/match_cost.json
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Annotated

import httpx
import numpy as np
import typer

from benchmarks.api_world import Server, World, syllable_words
from ssi.bundle import write_bundle
from ssi.forms import form_class
from ssi.vocab import Vocabulary
from training.encoder import build_encoder


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def _time_per_call(fn, repeats: int) -> float:  # noqa: ANN001 - any callable
    fn()  # warm up (numba compiles, caches fill)
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def main(
    root: Annotated[Path, typer.Option(help="Working folder (corpus, bundle, cache).")] = Path("/tmp/match-cost"),
    ads: Annotated[int, typer.Option(help="Adverts in the collection.")] = 100_000,
    page_kb: Annotated[int, typer.Option(help="Page size in kB.")] = 20,
    dims: Annotated[int, typer.Option(help="N of the lowrank bundle.")] = 100,
    seconds: Annotated[float, typer.Option(help="How long to send /match requests.")] = 30.0,
    out: Annotated[Path | None, typer.Option(help="Write the results JSON here.")] = None,
    seed: int = 0,
) -> None:
    rng = np.random.default_rng(seed)
    words = syllable_words(20_000, rng)
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    weights /= weights.sum()
    root.mkdir(parents=True, exist_ok=True)
    # All words drawn at once (one Zipf draw per word, not one call per advert).
    lengths = rng.integers(6, 13, size=ads)
    drawn = rng.choice(len(words), size=int(lengths.sum()), p=weights)
    ends = np.cumsum(lengths)
    texts = [" ".join(words[i] for i in drawn[end - n : end]) for n, end in zip(lengths, ends, strict=True)]
    page_words = [words[i] for i in rng.choice(len(words), size=page_kb * 400, p=weights)]
    page = " ".join(page_words)[: page_kb * 1000].rsplit(" ", 1)[0]
    ads_corpus = root / "ads.jsonl"
    with ads_corpus.open("w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"id": f"ad-{i:06d}", "title": "", "text": text, "category": f"c{i % 10}"}) + "\n")
    docs_corpus = root / "docs.jsonl"
    docs_corpus.write_text(json.dumps({"id": "page", "title": "", "text": page}) + "\n")
    vocab = Vocabulary.build([*texts, page], min_df=1)
    cls = form_class("lowrank")
    form = cls({n: (rng.standard_normal(s) * 0.1).astype(np.float32) for n, s in cls.shapes(dims, vocab.size).items()})
    bundle = root / "bundles" / "ads"
    write_bundle(bundle, form=form, vocab=vocab, encoder_onnx=build_encoder(form.query_map()))

    # In process: the two scorings of the page against every advert.
    X = vocab.featurize_documents(texts)
    q = vocab.featurize_queries([page])
    docs = vocab.doc_matrix(X)
    cached = form.embed_documents(X)  # V d of every advert, as the service caches it
    Ut = np.ascontiguousarray(form.query_map())

    def ssi_scores() -> np.ndarray:
        uq = (q @ Ut.T).ravel()
        return cached @ uq + (X @ q.T).toarray().ravel()

    hk_cls = form_class("hashkernel")
    hk = hk_cls({"W": (rng.standard_normal(1 << 20) * 0.01).astype(np.float32), "w": np.ones(vocab.size, np.float32)})
    uq = (q @ Ut.T).ravel()
    semantic_seconds = _time_per_call(lambda: cached @ uq, 20)  # the N multiplications per advert alone
    ssi_seconds = _time_per_call(ssi_scores, 20)
    hk_seconds = _time_per_call(lambda: hk.reference_scores(q, docs), 5)

    # Over HTTP: POST /match, one request at a time.
    world = World(root=root, corpus=docs_corpus, bundle=bundle, words=words)
    spec = {"ads": {"bundle": str(bundle), "corpus": str(ads_corpus), "type": "adverts"}}
    latencies: list[float] = []
    with Server(world, env={"SSI_COLLECTIONS": json.dumps(spec)}) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            body = {"page": page, "k": 10}
            for _ in range(5):
                assert client.post("/match", json=body).status_code == 200
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                t0 = time.perf_counter()
                response = client.post("/match", json=body)
                latencies.append(time.perf_counter() - t0)
                assert response.status_code == 200, response.text
            elapsed = time.perf_counter() - started
            answer = response.json()["results"][0]
    p50 = _percentile(latencies, 50)
    result = {
        "ads": ads,
        "page_chars": len(page),
        "page_words_known": answer["page_words"],
        "N": dims,
        "D": vocab.size,
        "http": {
            "requests": len(latencies),
            "throughput_per_s": round(len(latencies) / elapsed, 2),
            "p50_ms": round(p50 * 1000, 2),
            "p99_ms": round(_percentile(latencies, 99) * 1000, 2),
        },
        "in_process_ms": {
            "ssi_semantic_all_ads": round(semantic_seconds * 1000, 3),
            "ssi_all_ads": round(ssi_seconds * 1000, 3),
            "hashkernel_all_ads": round(hk_seconds * 1000, 3),
        },
        "ratios": {
            "hashkernel / ssi, in process": round(hk_seconds / ssi_seconds, 2),
            "hashkernel / ssi semantic part (cached V d), in process": round(hk_seconds / semantic_seconds, 2),
            "hashkernel in process / ssi /match p50 over HTTP": round(hk_seconds / p50, 2),
        },
        "machine": platform.machine(),
    }
    typer.echo(json.dumps(result, indent=2))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
