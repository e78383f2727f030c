"""Safe promotion (training.feedback.promote): the counterfactual estimate goes the right way, its standard
error matches the spread of the estimate over repeated logs, and identical rankers differ by exactly zero."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ssi.records import Document
from ssi.traffic import ShownResult, canonical_filter
from ssi.vocab import Vocabulary
from training.feedback.promote import (
    Fold,
    HeldOutImpression,
    Ranker,
    dcg_gain,
    estimate,
    estimate_folds,
    fixed_propensities,
    held_out_impressions,
    propensities_of,
    read_log,
    split_by_query,
    split_by_time,
    split_into_folds,
)

N_DOCS = 20
TEXTS = [f"topic{i} shared words here" for i in range(N_DOCS)]
QUERIES = [f"topic{i}" for i in range(N_DOCS)]  # query i's one relevant document is doc i


@dataclass
class FixedModel:
    """What Ranker reads of an `ssi.load` model, with the relevant document put at a chosen rank."""

    ids: list[str]
    bundle: SimpleNamespace
    rank_of_relevant: dict[str, int]
    documents: list[Document] = field(default_factory=list)  # with their fields, for filtered impressions

    def scores(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(self.ids)), dtype=np.float32)
        for row, text in enumerate(texts):
            if self.rank_of_relevant.get(text, 0) == 0:
                continue  # every document tied at 0
            target = QUERIES.index(text)
            others = [c for c in range(len(self.ids)) if c != target]
            order = others[: self.rank_of_relevant[text] - 1] + [target] + others[self.rank_of_relevant[text] - 1 :]
            out[row, order] = np.arange(len(self.ids), 0, -1, dtype=np.float32)
        return out


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.build(TEXTS, min_df=1)


def model(vocab: Vocabulary, ranks: dict[str, int]) -> FixedModel:
    return FixedModel([f"d{i}" for i in range(N_DOCS)], SimpleNamespace(vocab=vocab), ranks)


def simulate_log(
    rng: np.random.Generator, n_impressions: int, eta: float = 1.0, noise: float = 0.1
) -> list[ShownResult]:
    """Every document shown in uniformly random order (all randomized); position r examined with p = r^-eta;
    an examined relevant document clicked, an examined other one with probability `noise`."""
    out: list[ShownResult] = []
    for n in range(n_impressions):
        q = int(rng.integers(N_DOCS))
        order = rng.permutation(N_DOCS)
        for offset, doc in enumerate(order.tolist()):
            position = offset + 1
            examined = rng.random() < position**-eta
            clicked = examined and (doc == q or rng.random() < noise)
            out.append(
                ShownResult(
                    impression=f"i{n:05d}",
                    time=float(n),
                    kind="search",
                    model="m",
                    randomized=True,
                    position=position,
                    doc=f"d{doc}",
                    clicked=clicked,
                    dwell_ms=None,
                    text=QUERIES[q],
                    text_hash=None,
                )  # fmt: skip
            )
    return out


def test_ranker_ranks_with_ties_by_corpus_position(vocab: Vocabulary) -> None:
    ranks = {q: 3 for q in QUERIES} | {"topic5": 0}
    ranker = Ranker(model(vocab, ranks))
    assert ranker.ranks(["topic4", "unknownword"], [["d4", "nope"], ["d4"]]) == [[3.0, math.inf], [math.inf]]
    assert ranker.ranks(["topic5"], [["d5", "d0"]]) == [[6.0, 1.0]]  # all tied: corpus order
    assert dcg_gain(1.0) == 1.0 and dcg_gain(3.0) == pytest.approx(0.5) and dcg_gain(11.0, cutoff=10) == 0.0


def test_a_filtered_impression_is_replayed_among_the_documents_it_was_shown_among(
    vocab: Vocabulary, tmp_path: Path
) -> None:
    """An impression shown under a filter (ssi.traffic's `filtered`: the request's and its read key's) is ranked by
    both models among the documents matching it, over the corpus's fields (training.feedback.shown_filters); the
    same query under another filter is another list; a filter the corpus cannot answer is left out and counted;
    and a log exported before filters were recorded reads as unfiltered."""
    documents = [
        Document(f"d{i}", "", TEXTS[i], fields={"side": "even" if i % 2 == 0 else "odd"}) for i in range(N_DOCS)
    ]
    even = canonical_filter({"term": {"side": "even"}})
    served = FixedModel([d.id for d in documents], SimpleNamespace(vocab=vocab), {"topic4": 3}, documents)
    # topic4's relevant d4 is third overall, behind d0 and d1: second among the even documents, where d1 is not.
    assert Ranker(served).ranks(["topic4", "topic4"], [["d4"], ["d4"]], [None, even]) == [[3.0], [2.0]]

    def shown(impression: str, **filters: str) -> ShownResult:
        return ShownResult(
            impression, 0.0, "search", "m", False, 1, "d4", True, None, "topic4", None, None, **filters
        )  # fmt: skip

    key_only = canonical_filter({"term": {"side": "odd"}})
    log = [
        shown("plain"),
        shown("filtered", filter=even),
        shown("keyed", filter=even, read_key="0123456789abcdef", key_filter=key_only),
        shown("ghost", filter=canonical_filter({"term": {"region": "eu"}})),
    ]
    impressions, skipped = held_out_impressions(log, ranker=Ranker(served))
    by_name = {h.impression: h for h in impressions}  # all at time 0: sorted by name
    assert skipped.unknown_filter == 1 and sorted(by_name) == ["filtered", "keyed", "plain"]
    assert len({h.key for h in impressions}) == 3  # one query, three lists
    assert by_name["plain"].filter is None and by_name["filtered"].filter == even
    assert by_name["keyed"].filter == canonical_filter({"and": [json.loads(key_only), json.loads(even)]})
    # The served model's rank of the click, as replayed: among the even documents, second.
    candidate = FixedModel(served.ids, served.bundle, {"topic4": 1}, documents)
    result = estimate(served, candidate, [by_name["filtered"]], fixed_propensities(1.0), labels="ips")
    assert result.served == pytest.approx(dcg_gain(2.0)) and result.candidate == pytest.approx(dcg_gain(1.0))
    # Exported and read back: the filter travels; a line exported before it had none reads as unfiltered.
    exported = tmp_path / "log.jsonl"
    old = json.loads(shown("old").to_json())
    assert "filter" not in old and "read_key" not in old
    exported.write_text(
        "\n".join([shown("keyed", filter=even, read_key="ab", key_filter=key_only).to_json(), json.dumps(old)])
    )
    keyed, unfiltered = sorted(read_log(exported), key=lambda r: r.impression)
    assert (keyed.filter, keyed.read_key, keyed.key_filter) == (even, "ab", key_only)
    assert json.loads(exported.read_text().splitlines()[0])["filter"] == {"term": {"side": "even"}}
    assert unfiltered.shown_filter() is None


def test_better_candidate_is_promoted_and_worse_refused(vocab: Vocabulary) -> None:
    good = model(vocab, {q: 1 for q in QUERIES})
    bad = model(vocab, {q: 6 for q in QUERIES})
    log = simulate_log(np.random.default_rng(1), 400)
    impressions, skipped = held_out_impressions(log)
    assert len(impressions) == 400 and skipped.no_text == 0
    p = fixed_propensities(1.0)
    up = estimate(bad, good, impressions, p)
    down = estimate(good, bad, impressions, p)
    truth = dcg_gain(1) - dcg_gain(6)  # the relevant document's DCG moves this much on every query
    assert up.promote and not down.promote
    assert up.mean == pytest.approx(-down.mean) and up.stderr == pytest.approx(down.stderr)
    assert abs(up.mean - truth) < 4 * up.stderr
    assert up.ci95[0] < up.mean < up.ci95[1] and up.queries == N_DOCS
    assert up.candidate > up.served


def test_identical_candidate_gives_exactly_zero(vocab: Vocabulary) -> None:
    ranks = {q: 1 + i % 7 for i, q in enumerate(QUERIES)}
    log = simulate_log(np.random.default_rng(2), 200)
    impressions, _ = held_out_impressions(log)
    result = estimate(model(vocab, ranks), model(vocab, dict(ranks)), impressions, fixed_propensities(1.0))
    assert result.mean == 0.0 and result.stderr == 0.0 and not result.promote  # nothing to gain from a swap
    assert result.served == result.candidate > 0


@pytest.mark.parametrize("mixed", [False, True])
def test_stderr_matches_the_spread_over_repeated_logs(vocab: Vocabulary, mixed: bool) -> None:
    """The SE one log reports is close to the standard deviation of the estimate over independent logs where
    every query gains the same; where queries gain differently it is wider (queries count as sampled too)."""
    if mixed:
        served = model(vocab, {q: 1 + i % 5 for i, q in enumerate(QUERIES)})
        candidate = model(vocab, {q: 1 + (i + 2) % 5 for i, q in enumerate(QUERIES)})
    else:
        served, candidate = model(vocab, dict.fromkeys(QUERIES, 4)), model(vocab, dict.fromkeys(QUERIES, 2))
    rng = np.random.default_rng(3)
    means, errors = [], []
    for _ in range(40):  # no noisy clicks: the estimand is then the relevant documents' DCG difference
        impressions, _ = held_out_impressions(simulate_log(rng, 200, noise=0.0))
        result = estimate(served, candidate, impressions, fixed_propensities(1.0))
        means.append(result.mean)
        errors.append(result.stderr)
    spread = float(np.std(means, ddof=1))
    ratio = float(np.mean(errors)) / spread
    assert (1.0 < ratio < 2.5) if mixed else (0.7 < ratio < 1.4)
    truth = float(
        np.mean([dcg_gain(candidate.rank_of_relevant[q]) - dcg_gain(served.rank_of_relevant[q]) for q in QUERIES])
    )
    assert abs(float(np.mean(means)) - truth) < 4 * spread / math.sqrt(len(means))  # unbiased (no clip reached)


def test_no_clicks_is_no_evidence(vocab: Vocabulary) -> None:
    impressions = [HeldOutImpression("a", 0.0, "topic1", "topic1", ())]
    same = model(vocab, {q: 1 for q in QUERIES})
    result = estimate(same, same, impressions, fixed_propensities(1.0))
    assert result.clicks == 0 and not result.promote


def test_split_by_time_holds_out_the_newest_impressions() -> None:
    log = simulate_log(np.random.default_rng(4), 50)
    split = split_by_time(list(reversed(log)), 0.2)
    assert split.impressions == (40, 10)
    assert max(r.time for r in split.train) < split.cutoff == min(r.time for r in split.held_out) == 40.0
    with pytest.raises(ValueError):
        split_by_time(log[:N_DOCS], 0.2)  # one impression: nothing left to train on


def test_propensities_are_estimated_from_randomized_impressions() -> None:
    log = simulate_log(np.random.default_rng(5), 1500, eta=1.0, noise=0.0)
    p = propensities_of(log)
    assert p.estimated and 0.8 < p.eta < 1.2


def test_folds_partition_the_queries_and_fold_zero_is_the_query_split() -> None:
    log = simulate_log(np.random.default_rng(6), 300)
    folds = split_into_folds(log, 3)
    held = [{r.text for r in fold.held_out} for fold in folds]
    assert set().union(*held) == set(QUERIES) and sum(map(len, held)) == N_DOCS  # each query held out once
    for fold, queries in zip(folds, held, strict=True):
        assert not queries & {r.text for r in fold.train}  # a fold's candidate never sees its judging queries
        assert len(fold.train) + len(fold.held_out) == len(log)
    assert {r.text for r in split_by_query(log, 1 / 3).held_out} == held[0]  # the same hash, the same queries
    with pytest.raises(ValueError):
        split_into_folds(log, 1)


@pytest.mark.parametrize("labels", ["ips", "pbm"])
def test_pooled_folds_equal_one_estimate_over_all_their_queries(vocab: Vocabulary, labels: str) -> None:
    """Cross-fitting pools per-query rows: two folds judged by the same pair of models give exactly the estimate
    of that pair over all the queries at once (and every query counts, not a held-out share)."""
    served = model(vocab, {q: 1 + i % 5 for i, q in enumerate(QUERIES)})
    candidate = model(vocab, {q: 1 + (i + 1) % 4 for i, q in enumerate(QUERIES)})
    impressions, _ = held_out_impressions(simulate_log(np.random.default_rng(7), 400))
    first = {q for q in QUERIES[: N_DOCS // 2]}
    halves = [[h for h in impressions if (h.key in first) == side] for side in (True, False)]
    p = fixed_propensities(1.0)
    whole = estimate(served, candidate, impressions, p, labels=labels)
    pooled = estimate_folds([Fold(served, candidate, half) for half in halves], p, labels=labels)
    assert pooled.queries == whole.queries and pooled.folds == 2 and whole.folds == 1
    assert whole.queries == N_DOCS if labels == "ips" else whole.queries > N_DOCS // 2  # pbm: labelled queries
    tol = 1e-9 if labels == "ips" else 1e-3  # pbm: the click model is fitted on each fold's lines
    assert pooled.mean == pytest.approx(whole.mean, rel=tol) and pooled.stderr == pytest.approx(whole.stderr, rel=tol)
    assert pooled.impressions == whole.impressions and pooled.clicks == whole.clicks
    assert pooled.promote == whole.promote
