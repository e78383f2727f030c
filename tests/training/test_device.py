"""The GPU's training step, run on the CPU: the same arithmetic as the host's step, its own sampler's promises,
and `--device` as a user meets it on a machine without a GPU (tests/training/test_gpu.py runs it on one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from ssi_cli.main import build_app
from tests.training.replay import Replay, same_tables
from tests.training.synonyms import SynonymCorpus, held_out_map, make_synonym_corpus, train
from training.data import TrainingData, load_training_data
from training.device import resolve_device
from training.device_sampling import DeviceTripleSampler
from training.models.device_rows import DeviceCSR
from training.run import build_validator
from training.settings import TrainSettings
from training.trainer import Trainer

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def synonyms(tmp_path_factory: pytest.TempPathFactory) -> SynonymCorpus:
    return make_synonym_corpus(tmp_path_factory.mktemp("syn"))


@pytest.fixture(scope="module")
def data(synonyms: SynonymCorpus) -> TrainingData:
    return load_training_data(synonyms.corpus, pairs=synonyms.train_pairs, min_df=2)


def _settings(synonyms: SynonymCorpus, **extra: object) -> TrainSettings:
    given: dict = dict(corpus=synonyms.corpus, pairs=synonyms.train_pairs, out=Path("unused"), n_dims=8, lr=0.1)
    given.update(seed=3, threads=1, batch_queries=32, device="cpu")
    return TrainSettings(**(given | extra))


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("lowrank", {}),
        ("lowrank", {"pool_size": 40}),  # the corpus beyond the pool: the step gathers its pool's rows
        ("lowrank", {"max_gram_entries": 0}),  # q·d computed each step, not cached
        ("symmetric", {}),
        ("noidentity", {}),
        ("fullw", {"vocab_size": 300}),
    ],
)
def test_the_device_step_equals_the_host_step_on_the_same_triples(
    synonyms: SynonymCorpus, data: TrainingData, kind: str, extra: dict
) -> None:
    settings = _settings(synonyms, kind=kind, **extra)
    if "vocab_size" in extra:
        data = load_training_data(synonyms.corpus, pairs=synonyms.train_pairs, min_df=2, vocab_size=300)
    host = Trainer(data, settings, device_path=False)
    device = Trainer(data, settings, device_path=True)
    assert device.on_device and not host.on_device
    replay = Replay(host)
    replay.record()
    device.sampler = replay  # type: ignore[assignment]
    for _ in range(12):
        host_loss, host_violated, host_used = host.step()
        loss, violated, used = device.step()
        assert isinstance(loss, torch.Tensor)  # a device step hands back tensors, read when asked for
        assert float(loss) == pytest.approx(host_loss, rel=1e-4, abs=1e-6)
        assert float(violated) == pytest.approx(host_violated) and int(used) == host_used
    same_tables(host, device)


def test_gathered_rows_give_the_products_of_the_rows_themselves(data: TrainingData) -> None:
    matrix = data.X_docs
    rows = DeviceCSR(matrix, 50, CPU)
    pick = torch.tensor([3, 0, 3, 7])  # repeats allowed (a pool may hold a document twice)
    block = rows.rows(pick)
    dense = torch.from_numpy(matrix[:, :50].toarray())[pick]
    W = torch.randn(50, 4, dtype=torch.float32)
    G = torch.randn(4, 4, dtype=torch.float32)
    torch.testing.assert_close(block.times(W), dense @ W, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(block.t_times(G), dense.T @ G, rtol=1e-5, atol=1e-5)
    assert torch.equal(block.touched, (dense != 0).any(dim=0))
    torch.testing.assert_close(rows.dense(pick), dense)
    whole = rows.whole()
    torch.testing.assert_close(whole.times(W), torch.from_numpy(matrix[:, :50].toarray()) @ W, rtol=1e-5, atol=1e-5)


def _sampler(data: TrainingData, **extra: object) -> DeviceTripleSampler:
    given: dict = dict(doc_doc=data.doc_doc, batch_queries=16, positives_per_query=4, negatives_per_positive=2)
    given.update(pool_size=10_000, hard_fraction=0.5, hard_pool=5, seed=0)
    return DeviceTripleSampler(data.train, data.X_docs.shape[0], device=CPU, **(given | extra))


@pytest.mark.parametrize(("pool_size", "hard_fraction"), [(10_000, 0.5), (40, 0.5), (40, 0.0)])
def test_the_device_sampler_draws_real_positives_and_never_a_positive_as_negative(
    data: TrainingData, pool_size: int, hard_fraction: float
) -> None:
    sampler = _sampler(data, pool_size=pool_size, hard_fraction=hard_fraction)
    pairs = set(zip(data.train.query_rows.tolist(), data.train.doc_rows.tolist(), strict=True))
    seen: list[int] = []
    for _ in range(sampler.steps_per_epoch):
        plan = sampler.plan()
        seen += plan.queries.tolist()
        pool = torch.arange(plan.n_pool) if plan.pool is None else plan.pool
        scores = torch.randn(plan.queries.numel(), plan.n_pool)
        neg, valid = sampler.negatives(plan, scores)
        q = plan.queries[plan.triple_query]
        columns = (q.tolist(), pool[plan.triple_pos].tolist(), pool[neg].tolist(), valid.tolist())
        for query, pos, bad, ok in zip(*columns, strict=True):
            assert (query, pos) in pairs
            if ok:
                assert (query, bad) not in pairs and bad != query
        assert valid.float().mean() > 0.9
        if plan.pool is not None and hard_fraction == 0:  # uniform negatives come from the pool's uniform part
            assert bool((neg >= plan.uniform_from).all())
    assert sorted(seen) == sorted(set(data.train.query_rows.tolist()))  # an epoch visits each query once


def test_the_device_sampler_carries_the_pairs_weights(data: TrainingData) -> None:
    weights = np.arange(1, data.train.size + 1, dtype=np.float64)
    data.train.weights = weights
    try:
        sampler = _sampler(data)
        plan = sampler.plan()
    finally:
        data.train.weights = None
    keys = zip(data.train.query_rows.tolist(), data.train.doc_rows.tolist(), strict=True)
    by_pair = dict(zip(keys, weights, strict=True))
    q = plan.queries[plan.triple_query].tolist()
    assert plan.weights is not None
    for query, doc, w in zip(q, plan.triple_pos.tolist(), plan.weights.tolist(), strict=True):
        assert w == pytest.approx(by_pair[(query, doc)] / weights.mean())


def test_the_device_path_learns_on_the_cpu_as_the_host_does(synonyms: SynonymCorpus) -> None:
    """Its own triples, same budget: both beat tf-idf on held-out links by far, and by about as much."""
    data = load_training_data(synonyms.corpus, pairs=synonyms.train_pairs, valid_pairs=synonyms.valid_pairs, min_df=2)
    settings = _settings(synonyms, epochs=30, eval_every=25)
    validator = build_validator(data, data.vocab.doc_matrix(data.X_docs), settings)
    results = {
        on_device: Trainer(data, settings, validator, device_path=on_device).run(show_progress=False)
        for on_device in (False, True)
    }
    host, device = results[False], results[True]
    assert Trainer(data, settings, device_path=True).lexical is not None  # validation reads its q·d (training.run)
    start = device.history[0]["map"]  # step 0: tf-idf
    assert device.best_metrics["map"] > 0.8 and device.best_metrics["map"] > 5 * start
    assert device.best_metrics["map"] == pytest.approx(host.best_metrics["map"], abs=0.1)
    assert device.triples == pytest.approx(host.triples, rel=0.05)


def test_ssi_train_device_cpu_writes_a_bundle_that_beats_tfidf(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    summary = train(synonyms, tmp_path / "b", "--device", "cpu", "--epochs", "30", "--dims", "16", "--lr", "0.1")
    learned, tfidf = held_out_map(synonyms, tmp_path / "b")
    assert learned > 0.8 > 0.1 > tfidf
    assert summary["steps"] > 0 and summary["device"] == "cpu"


def test_device_auto_without_a_gpu_is_the_cpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU (tests/training/test_gpu.py)")
    assert resolve_device("auto") == CPU


@pytest.mark.parametrize(("flag", "message"), [("cuda", "sees no GPU"), ("gpu", "auto, cpu, cuda or cuda:N")])
def test_a_device_that_is_not_there_is_a_clear_cli_error(
    synonyms: SynonymCorpus, tmp_path: Path, flag: str, message: str
) -> None:
    if torch.cuda.is_available() and flag == "cuda":
        pytest.skip("this machine has a GPU")
    args = ["train", "--corpus", str(synonyms.corpus), "--pairs", str(synonyms.train_pairs)]
    args += ["--out", str(tmp_path / "b"), "--no-progress", "--device", flag, "--epochs", "1"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code != 0
    said = " ".join(result.output.replace("│", " ").split())  # the error box wraps its lines
    assert message in said and "Traceback" not in said
    assert not (tmp_path / "b").exists()
