"""The API's docstring examples run here, against the fixtures they name: what `help(ssi)` shows works.

The examples name their inputs (`corpus`, `pairs`, `valid_pairs`, `folder`, `bundle`, `query`, `url`,
`api_key`) instead of inventing paths, and this test gives them: the synonym corpus, a folder of its own, the
model trained on it and a real server of that model (its own, since the examples write to it).
"""

from __future__ import annotations

import doctest
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import ssi
import ssi.api.client
import ssi.api.model
import ssi.api.train
from tests.api.conftest import ApiWorld
from tests.service.service_testing import API_KEY, ThreadServer

MODULES = [ssi, ssi.api.train, ssi.api.model, ssi.api.client]


@pytest.fixture(scope="module")
def example_server(api_world: ApiWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    cache = tmp_path_factory.mktemp("cache")
    with ThreadServer(
        bundle=api_world.trained.bundle, corpus=api_world.data.corpus, cache_dir=cache, api_key=API_KEY
    ) as running:
        yield running


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples_run(
    module: ModuleType, api_world: ApiWorld, example_server: ThreadServer, tmp_path: Path
) -> None:
    inputs = {
        "corpus": api_world.data.corpus,
        "pairs": api_world.data.train_pairs,
        "valid_pairs": api_world.data.valid_pairs,
        "query": "left0w1 common3",
        "folder": tmp_path,
        "bundle": api_world.trained.bundle,
        "url": example_server.url,
        "api_key": API_KEY,
    }
    tests = [t for t in doctest.DocTestFinder().find(module, globs=inputs) if t.examples]
    assert tests, f"{module.__name__} has no examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries >= 3


def test_help_shows_the_api_and_dir_lists_it() -> None:
    assert {"train", "load", "Client", "ServiceError", "Hit", "Trained"} <= set(dir(ssi))
    assert set(ssi.__all__) - {"__version__"} == ssi._TRAIN | ssi._MODEL | ssi._CLIENT
    for name in ssi.__all__:
        assert getattr(ssi, name) is not None
    for call in ("ssi.train(", "ssi.load(", "ssi.Client("):
        assert call in (ssi.__doc__ or "")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ssi.nope  # noqa: B018
