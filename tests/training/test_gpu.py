"""The training step on a GPU: skipped where PyTorch sees none (CI); `bash scripts/gpu_check.sh` runs it on one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ssi_cli.main import build_app
from tests.training.replay import Replay, same_tables
from tests.training.synonyms import SynonymCorpus, held_out_map, make_synonym_corpus, train
from training.data import load_training_data
from training.device import resolve_device
from training.settings import TrainSettings
from training.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here (PyTorch sees no CUDA device)")


@pytest.fixture(scope="module")
def synonyms(tmp_path_factory: pytest.TempPathFactory) -> SynonymCorpus:
    return make_synonym_corpus(tmp_path_factory.mktemp("syn"))


def test_auto_takes_the_gpu() -> None:
    assert resolve_device("auto").type == "cuda"


@pytest.mark.parametrize(
    ("kind", "extra"),
    [("lowrank", {}), ("lowrank", {"pool_size": 40}), ("lowrank", {"max_gram_entries": 0}), ("symmetric", {})],
)
def test_the_gpu_step_equals_the_host_step_on_the_same_triples(synonyms: SynonymCorpus, kind: str, extra: dict) -> None:
    data = load_training_data(synonyms.corpus, pairs=synonyms.train_pairs, min_df=2)
    given: dict = dict(corpus=synonyms.corpus, pairs=synonyms.train_pairs, out=Path("unused"), n_dims=8, lr=0.1)
    given.update(seed=3, threads=1, batch_queries=32, kind=kind, **extra)
    host = Trainer(data, TrainSettings(**given, device="cpu"))
    gpu = Trainer(data, TrainSettings(**given, device="cuda"))
    assert gpu.on_device and gpu.device.type == "cuda" and gpu.model.U.is_cuda
    replay = Replay(host, device=gpu.device)
    replay.record()
    gpu.sampler = replay  # type: ignore[assignment]
    for _ in range(12):
        host_loss, _, host_used = host.step()
        loss, _, used = gpu.step()
        assert float(loss) == pytest.approx(host_loss, rel=1e-4, abs=1e-6) and int(used) == host_used
    same_tables(host, gpu)


def test_ssi_train_on_the_gpu_writes_a_bundle_that_beats_tfidf(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    summary = train(synonyms, tmp_path / "b", "--device", "cuda", "--epochs", "30", "--dims", "16", "--lr", "0.1")
    assert summary["device"].startswith("cuda")
    learned, tfidf = held_out_map(synonyms, tmp_path / "b")
    assert learned > 0.8 > 0.1 > tfidf


def test_a_kind_that_trains_on_the_cpu_is_refused_on_cuda_and_taken_there_by_auto(
    synonyms: SynonymCorpus, tmp_path: Path
) -> None:
    args = ["train", "--corpus", str(synonyms.corpus), "--pairs", str(synonyms.train_pairs), "--no-progress"]
    args += ["--kind", "hashkernel", "--epochs", "1", "--hash-size", "1024"]
    refused = CliRunner().invoke(build_app(), [*args, "--out", str(tmp_path / "a"), "--device", "cuda"])
    assert refused.exit_code == 2 and "trains on the CPU only" in refused.output
    taken = CliRunner().invoke(build_app(), [*args, "--out", str(tmp_path / "b"), "--device", "auto"])
    assert taken.exit_code == 0, taken.output
