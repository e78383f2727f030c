"""One list of kinds (training.kinds): the registries hold exactly its names, help and errors list them all."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from training.fitted import FITTED
from training.kinds import FITTED_KINDS, KINDS, SGD_KINDS, kinds_help
from training.models import REGISTRY
from training.settings import TrainSettings


def test_the_registries_hold_exactly_the_listed_kinds() -> None:
    assert set(REGISTRY) == set(SGD_KINDS) and set(FITTED) == set(FITTED_KINDS)
    assert not set(SGD_KINDS) & set(FITTED_KINDS)
    assert all(kind in kinds_help() for kind in KINDS)


def test_an_unknown_kind_is_refused_with_every_kind_named() -> None:
    with pytest.raises(ValidationError) as refused:
        TrainSettings(corpus="c.jsonl", out="b", pairs="p.tsv", kind="lowrnak")
    message = str(refused.value)
    assert "unknown --kind 'lowrnak'" in message and all(kind in message for kind in KINDS)
