"""Fixtures of the Python API's tests: a small synonym corpus, one model trained on it through `ssi.train`
(seconds: 288 documents, N = 8, a few epochs), and real servers of that model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import ssi
from tests.service.service_testing import API_KEY, ThreadServer
from tests.training.synonyms import SynonymCorpus, make_synonym_corpus

# What every tiny run here trains with: one thread and a seed, so the API and the command give the same model.
TINY = {"epochs": 3, "n_dims": 8, "lr": 0.1, "seed": 1, "threads": 1}


@dataclass(frozen=True)
class ApiWorld:
    data: SynonymCorpus
    trained: ssi.Trained
    root: Path


@pytest.fixture(scope="session")
def api_world(tmp_path_factory: pytest.TempPathFactory) -> ApiWorld:
    root = tmp_path_factory.mktemp("api")
    data = make_synonym_corpus(root / "data")
    trained = ssi.train(
        data.corpus, data.train_pairs, valid_pairs=data.valid_pairs, out=root / "bundle", progress=False, **TINY
    )
    return ApiWorld(data, trained, root)


@pytest.fixture(scope="module")
def server(api_world: ApiWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """The trained model served by a real uvicorn server, writes keyed by API_KEY."""
    cache = tmp_path_factory.mktemp("cache")
    with ThreadServer(
        bundle=api_world.trained.bundle, corpus=api_world.data.corpus, cache_dir=cache, api_key=API_KEY
    ) as running:
        yield running
