"""Fixtures shared by the training tests."""

from __future__ import annotations

import pytest

from tests.training.synonyms import SynonymCorpus, make_synonym_corpus


@pytest.fixture(scope="module")
def synonyms(tmp_path_factory: pytest.TempPathFactory) -> SynonymCorpus:
    return make_synonym_corpus(tmp_path_factory.mktemp("synonyms"))
