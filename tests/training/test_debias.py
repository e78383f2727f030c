"""Training from the service's traffic log: propensities, click weights, weighted pairs and the weighted loss."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import DataFileError
from ssi.records import Pair
from ssi.traffic import EVENTS_SCHEMA, EVENTS_SCHEMA_VERSION, ShownResult
from ssi_cli.main import build_app
from training.click_recipe import CLICK_RECIPE
from training.clicks import Impression, load_click_pairs, read_click_log
from training.data import PairIndex, index_pairs
from training.debias import Propensities, click_weights, estimate_propensities
from training.loss import margin_ranking
from training.sampling import TripleSampler


def simulate(
    rng: np.random.Generator, eta: float, impressions: int, n_docs: int = 10, relevant: float = 0.3
) -> list[Impression]:
    """Randomized impressions: position r is examined with p = r^-eta, a shown document clicked with `relevant`."""
    lines = []
    for i in range(impressions):
        for r in range(1, n_docs + 1):
            clicked = rng.random() < r**-eta and rng.random() < relevant
            lines.append(Impression(f"q{i % 50}", f"d{rng.integers(1000)}", r, clicked, True, f"i{i}"))
    return lines


@pytest.mark.parametrize("eta", [0.6, 1.0, 1.5])
def test_the_propensity_estimate_recovers_eta_of_a_simulated_log(eta: float) -> None:
    lines = simulate(np.random.default_rng(int(eta * 10)), eta, 4000)
    fitted = estimate_propensities(lines)
    assert fitted.estimated and abs(fitted.eta - eta) < 0.1, fitted
    assert fitted.randomized_results == 40_000 and fitted.at(1) == 1.0
    assert "estimated from" in fitted.describe()
    # Non-randomized lines say nothing about examination: they are left out of the estimate.
    shown_in_order = [Impression(x.page_id, x.ad_id, x.position, x.position == 1) for x in lines]
    assert estimate_propensities(lines + shown_in_order).eta == fitted.eta


def test_too_few_randomized_clicks_fall_back_to_eta_1() -> None:
    fitted = estimate_propensities(simulate(np.random.default_rng(0), 0.5, 20, relevant=0.1))
    assert not fitted.estimated and fitted.eta == 1.0 and fitted.randomized_clicks < 50
    assert "fallback" in fitted.describe()


def test_naive_weights_count_clicks_and_ips_weights_sum_clipped_inverse_propensities() -> None:
    lines = [
        Impression("q", "a", 1, True),
        Impression("q", "a", 3, True),
        Impression("q", "a", 50, True),
        Impression("q", "b", 2, False),
        Impression("r", "b", 2, True),
    ]
    naive = click_weights(lines, "naive")
    assert naive.pairs == [Pair("q", "a"), Pair("r", "b")] and naive.weights == [3.0, 1.0]
    ips = click_weights(lines, "ips", Propensities(1.0, True, 0, 0, {}), clip=20.0)
    assert ips.weights == [1.0 + 3.0 + 20.0, 2.0] and ips.clipped == 1 and ips.clicks == 4
    with pytest.raises(ValueError):
        click_weights(lines, "top")


def test_ips_recovers_relevant_documents_that_naive_underweights() -> None:
    """Users examine position r with p = 1/r and click relevant documents with 0.9, others with 0.1.

    The production ranker shows a noise document first and the relevant one at position 15: naive counts
    prefer the top noise click, inverse propensity weights the relevant document.
    """
    rng = np.random.default_rng(7)
    lines = simulate(rng, 1.0, 3000, relevant=0.3)  # the randomized share, on other queries

    def click(position: int, relevant: bool) -> bool:
        return bool(rng.random() < 1.0 / position and rng.random() < (0.9 if relevant else 0.1))

    for q in range(20):
        for i in range(100):
            for r in range(1, 16):
                doc = "rel" if r == 15 else ("noise" if r == 1 else f"filler{r}")
                lines.append(Impression(f"query{q}", f"{q}:{doc}", r, click(r, r == 15), False, f"{q}-{i}"))
    propensities = estimate_propensities(lines)
    assert abs(propensities.eta - 1.0) < 0.1

    def rel_above_noise(mode: str) -> float:
        made = click_weights(lines, mode, propensities)  # type: ignore[arg-type]
        weight = dict(zip(made.pairs, made.weights, strict=True))
        wins = [
            weight.get(Pair(f"query{q}", f"{q}:rel"), 0.0) > weight.get(Pair(f"query{q}", f"{q}:noise"), 0.0)
            for q in range(20)
        ]
        return sum(wins) / len(wins)

    assert rel_above_noise("ips") >= 0.9
    assert rel_above_noise("naive") <= 0.3


def test_the_click_model_sets_relevant_results_apart_from_the_clicks_users_give_anything() -> None:
    """Each query shows one relevant result at a random one of 10 positions among 9 others; users examine r with
    p = 1/r and click 0.9 / 0.1. IPS gives the 9 non-relevant results of a query together about the weight of the
    relevant one (each 0.1 per examination, 9 of them); the position-based model's γ̂ above its floor keeps the
    relevant pairs alone."""
    rng = np.random.default_rng(11)
    lines: list[Impression] = []
    for q in range(30):
        rel = int(rng.integers(1, 11))
        for i in range(200):
            for r in range(1, 11):
                examined = rng.random() < 1.0 / r
                clicked = bool(examined and rng.random() < (0.9 if r == rel else 0.1))
                lines.append(Impression(f"q{q}", f"q{q}:{'rel' if r == rel else r}", r, clicked, False, f"{q}-{i}"))
    eta_one = Propensities(1.0, False, 0, 0, {})

    def relevant_share(mode: str) -> float:
        made = click_weights(lines, mode, eta_one)  # type: ignore[arg-type]
        total = sum(made.weights)
        return sum(w for p, w in zip(made.pairs, made.weights, strict=True) if p.doc_id.endswith(":rel")) / total

    assert relevant_share("ips") < 0.65  # about half: the noise of 9 results weighs as much as the relevant one
    assert relevant_share("pbm") > 0.99
    pbm = click_weights(lines, "pbm", eta_one)
    assert {p.doc_id.split(":")[1] for p in pbm.pairs} == {"rel"} and len(pbm.pairs) == 30
    assert all(0.2 < w <= 0.6 for w in pbm.weights)  # γ̂ ≈ 0.9 over the 0.5 floor


def test_weighted_duplicates_are_merged_and_unweighted_ones_dropped() -> None:
    pairs = [Pair("q", "a"), Pair("q", "b"), Pair("q", "a"), Pair("x", "a")]
    rows = {"q": 0, "a": 0, "b": 1}
    plain = index_pairs(pairs, rows, rows, doc_doc=False)
    assert plain.weights is None and plain.n_duplicate == 1 and plain.size == 2
    weighted = index_pairs(pairs, rows, rows, doc_doc=False, weights=[1.0, 2.0, 0.5, 9.0])
    assert weighted.weights is not None and weighted.weights.tolist() == [1.5, 2.0]
    assert weighted.n_merged == 1 and weighted.n_duplicate == 0 and weighted.n_unknown_query == 1


def _sampler(pairs: PairIndex, seed: int = 3) -> TripleSampler:
    return TripleSampler(
        pairs, 40, doc_doc=False, batch_queries=4, positives_per_query=3, negatives_per_positive=2,
        pool_size=20, hard_fraction=0.0, hard_pool=5, seed=seed,
    )  # fmt: skip


def test_the_sampler_carries_pair_weights_scaled_to_mean_1_and_draws_as_without() -> None:
    q = np.repeat(np.arange(6), 3)
    d = np.arange(18) * 2 % 40
    w = np.arange(1, 19, dtype=np.float64)
    plain, weighted = _sampler(PairIndex(q, d)), _sampler(PairIndex(q, d, weights=w))
    assert weighted.pos_weight is not None and np.isclose(weighted.pos_weight.mean(), 1.0)
    for _ in range(3):
        a, b = plain.plan(), weighted.plan()
        assert a.weights is None and b.weights is not None
        assert np.array_equal(a.queries, b.queries) and np.array_equal(a.triple_pos, b.triple_pos)
        doc_of = {(int(qq), int(dd)): ww / w.mean() for qq, dd, ww in zip(q, d, w, strict=True)}
        rows = b.pool_rows()
        expect = [doc_of[(int(b.queries[t]), int(rows[p]))] for t, p in zip(b.triple_query, b.triple_pos, strict=True)]
        assert np.allclose(b.weights, expect)


def _today(scores, tq, tp, tn, valid, margin=1.0):  # type: ignore[no-untyped-def]
    """The unweighted loss as it was before weights existed (the reference for bit-identity)."""
    n_rows, n_cols = scores.shape
    flat = scores.ravel()
    pos_cell, neg_cell = tq * n_cols + tp, tq * n_cols + tn
    hinge = margin - flat[pos_cell] + flat[neg_cell]
    active = (hinge > 0) & valid
    count = max(int(valid.sum()), 1)
    weight = active / count
    coeff = np.bincount(neg_cell, weights=weight, minlength=flat.size) - np.bincount(
        pos_cell, weights=weight, minlength=flat.size
    )
    loss = float(np.maximum(hinge, 0.0)[valid].sum() / count)
    return loss, coeff.reshape(n_rows, n_cols).astype(np.float32), float(active.sum() / count)


def _triples(rng: np.random.Generator, n: int = 300) -> tuple[np.ndarray, ...]:
    scores = rng.normal(size=(8, 30)).astype(np.float32)
    return (
        scores, rng.integers(0, 8, n), rng.integers(0, 30, n), rng.integers(0, 30, n), rng.random(n) < 0.9,
    )  # fmt: skip


def _loss(*arrays: np.ndarray | float) -> tuple[float, np.ndarray, float]:
    """training.loss.margin_ranking (torch) on numpy arguments, its results back as numbers and an array."""
    args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in arrays]
    loss, coeff, violated = margin_ranking(*args)
    return float(loss), coeff.numpy(), float(violated)


def test_the_unweighted_loss_is_bit_identical_to_todays() -> None:
    scores, tq, tp, tn, valid = _triples(np.random.default_rng(0))
    reference = _today(scores, tq, tp, tn, valid, 0.7)
    loss, coeff, violated = _loss(scores, tq, tp, tn, valid, 0.7)
    assert np.isclose(loss, reference[0], rtol=1e-6) and violated == reference[2]
    assert np.array_equal(coeff, reference[1]) and coeff.dtype == np.float32
    ones = _loss(scores, tq, tp, tn, valid, 0.7, np.ones(tq.size))  # float64 weights: equal, not bitwise
    assert np.isclose(ones[0], loss) and np.array_equal(ones[1], coeff) and ones[2] == violated


def test_the_weighted_loss_equals_the_unweighted_loss_over_duplicated_triples() -> None:
    rng = np.random.default_rng(1)
    scores, tq, tp, tn, valid = _triples(rng)
    weights = rng.integers(1, 4, tq.size).astype(np.float64)
    loss, coeff, _ = _loss(scores, tq, tp, tn, valid, 1.0, weights)
    copies = weights.astype(np.int64)
    dup = [np.repeat(x, copies) for x in (tq, tp, tn, valid)]
    dup_loss, dup_coeff, _ = _loss(scores, *dup, 1.0)
    # Both divide by their own count of valid triples: the duplicated one counts each triple `weight` times.
    scale = weights[valid].sum() / valid.sum()
    assert np.isclose(loss, dup_loss * scale)
    assert np.allclose(coeff, dup_coeff * scale, atol=1e-6)


def _event_store(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(EVENTS_SCHEMA)
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (EVENTS_SCHEMA_VERSION,))
    conn.execute("INSERT INTO texts VALUES ('h1', 'apple pie')")
    conn.execute("INSERT INTO texts VALUES ('h2', NULL)")
    rows = [
        ("i1", 1.0, "search", "h1", "m", 1, 1, json.dumps(["d1", "d2", "d3"])),
        ("i2", 2.0, "search", "h2", "m", 0, 1, json.dumps(["d2", "d1"])),
        ("i3", 3.0, "search", "h1", "m", 0, 11, json.dumps(["d4"])),
    ]
    conn.executemany("INSERT INTO impressions VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany(
        "INSERT INTO clicks VALUES (?, ?, ?, ?, ?)",
        [("i1", "d2", 2, 1.5, 3000.0), ("i2", "d2", 1, 2.5, None), ("i3", "d4", 11, 3.5, None)],
    )
    conn.commit()
    conn.close()


def test_the_service_event_store_is_read_as_a_click_log(tmp_path: Path) -> None:
    store = tmp_path / "events.sqlite"
    _event_store(store)
    log = read_click_log(store)
    assert log.hashed_only == 2  # impression i2 kept no text: its two shown results
    assert [(i.ad_id, i.position, i.clicked, i.randomized) for i in log.impressions] == [
        ("d1", 1, False, True), ("d2", 2, True, True), ("d3", 3, False, True), ("d4", 11, True, False),
    ]  # fmt: skip
    assert log.impressions[1].dwell_ms == 3000.0 and log.impressions[1].impression == "i1"
    assert list(log.inline_pages.values()) == ["apple pie"]
    made = load_click_pairs(store, pages=None, valid_share=0.0, debias="ips")
    assert made.train_weights == [2.0, 11.0]  # eta falls back to 1: p(2) = 1/2, p(11) = 1/11
    assert made.propensities is not None and not made.propensities.estimated
    assert any("hash only" in note for note in made.notes)


def test_exported_lines_read_with_the_service_names_and_hash_only_lines_are_counted(tmp_path: Path) -> None:
    shown = [
        ShownResult("i1", 1.0, "search", "m", True, 1, "d1", True, 800.0, "apple pie", None),
        ShownResult("i1", 1.0, "search", "m", True, 2, "d2", False, None, "apple pie", None),
        ShownResult("i2", 2.0, "search", "m", False, 1, "d1", True, None, None, "abc"),
        ShownResult("i3", 3.0, "match", "m", False, 2, "ad9", True, None, "a page about ovens", None),
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(s.to_json() + "\n" for s in shown))
    log = read_click_log(path)
    assert log.hashed_only == 1 and [i.ad_id for i in log.impressions] == ["d1", "d2", "ad9"]
    assert log.impressions[0].randomized and log.impressions[0].dwell_ms == 800.0
    assert sorted(log.inline_pages.values()) == ["a page about ovens", "apple pie"]
    hashed = tmp_path / "hashed.jsonl"
    hashed.write_text(shown[2].to_json() + "\n")
    with pytest.raises(DataFileError, match="hash only"):
        read_click_log(hashed)


def _tiny_world(folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """20 documents of 5 topics; 30 queries, each relevant to one document, shown by a ranker in a log."""
    rng = np.random.default_rng(seed)
    docs, lines = [], []
    for d in range(20):
        words = [f"topic{d % 5}w{rng.integers(6)}" for _ in range(8)] + [f"doc{d}word", f"filler{rng.integers(9)}"]
        docs.append({"id": f"d{d}", "title": f"doc{d}word", "text": " ".join(words)})
    for q in range(30):
        target = q % 20
        text = f"doc{target}word topic{target % 5}w{q % 6}"
        for i in range(6):
            shown = list(rng.permutation(20)[:8])
            randomized = i % 3 == 0
            for r, d in enumerate(shown, start=1):
                examined = rng.random() < 1.0 / r
                clicked = bool(examined and rng.random() < (0.9 if d == target else 0.1))
                record = {
                    "impression": f"{q}-{i}", "time": float(i), "model": "m", "randomized": randomized,
                    "position": r, "query": text, "doc": f"d{d}", "clicked": clicked, "dwell_ms": None,
                }  # fmt: skip
                lines.append(json.dumps(record))
    corpus, log = folder / "corpus.jsonl", folder / "log.jsonl"
    corpus.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    log.write_text("\n".join(lines) + "\n")
    return corpus, log


TRAIN = ["--epochs", "3", "--dims", "8", "--no-progress", "--threads", "1", "--eval-every", "2", "--batch-queries", "8"]


def test_ssi_train_on_a_click_log_with_ips_exports_a_bundle(tmp_path: Path) -> None:
    corpus, log = _tiny_world(tmp_path)
    args = ["train", "--corpus", str(corpus), "--clicks", str(log), "--debias", "ips", "--out", str(tmp_path / "b")]
    result = CliRunner().invoke(build_app(), [*args, *TRAIN, "--valid-share", "0.2"])  # a share given wins
    assert result.exit_code == 0, result.output
    assert "propensities: p(r) = r^-" in result.output and "click pairs (ips):" in result.output
    data = load_bundle(tmp_path / "b").manifest.data
    assert data["clicks"]["debias"] == "ips" and data["clicks"]["propensity"]["clip"] == 20.0
    assert data["task"] == "adverts" and data["valid_pairs"] > 0


def test_ssi_train_on_a_search_click_log_alone_trains_the_click_recipe(tmp_path: Path) -> None:
    """No validation on clicks, the recipe's rate and uniform negatives (training.click_recipe): with the
    trainer's own defaults the loop's models kept their start."""
    corpus, log = _tiny_world(tmp_path)
    args = ["train", "--corpus", str(corpus), "--clicks", str(log), "--out", str(tmp_path / "b"), "--no-progress"]
    result = CliRunner().invoke(build_app(), [*args, "--dims", "8", "--threads", "1", "--epochs", "2"])
    assert result.exit_code == 0, result.output
    manifest = load_bundle(tmp_path / "b").manifest
    assert manifest.data["valid_pairs"] == 0
    config = manifest.training["config"]
    assert (config["lr"], config["hard_fraction"], config["valid_share"]) == (CLICK_RECIPE.lr, 0.0, 0.0)
    assert (config["init_scale"], config["ensemble"]) == (CLICK_RECIPE.init_scale, CLICK_RECIPE.ensemble)


def test_clicks_train_beside_labelled_queries(tmp_path: Path) -> None:
    corpus, log = _tiny_world(tmp_path)
    queries, qrels = tmp_path / "queries.jsonl", tmp_path / "qrels.tsv"
    queries.write_text("".join(json.dumps({"_id": f"L{i}", "text": f"doc{i}word"}) + "\n" for i in range(20)))
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"L{i}\td{i}\t1\n" for i in range(20)))
    args = ["train", "--corpus", str(corpus), "--clicks", str(log), "--queries", str(queries), "--qrels", str(qrels)]
    result = CliRunner().invoke(build_app(), args + ["--debias", "naive", "--out", str(tmp_path / "b"), *TRAIN])
    assert result.exit_code == 0, result.output
    data = load_bundle(tmp_path / "b").manifest.data
    assert data["task"] == "queries and clicks" and data["clicks"]["debias"] == "naive"
    assert data["n_queries"] == 20 + 30
    refuse = ["train", "--corpus", str(corpus), "--clicks", str(log), "--clicked-position", "1", "--debias", "ips"]
    refused = CliRunner().invoke(build_app(), [*refuse, "--out", str(tmp_path / "c")])
    assert refused.exit_code != 0 and "--debias top" in refused.output
