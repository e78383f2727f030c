"""The results table's recipes (benchmarks/results_table.py) name kinds that exist and rows that are distinct,
so the one documented command does not fail an hour into a run."""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_table import RECIPES, Layout, task_flags
from training.fitted import FITTED
from training.models import REGISTRY
from training.settings import TrainSettings


def test_every_recipe_names_a_known_kind_and_a_distinct_row() -> None:
    rows = [r.row for r in RECIPES]
    assert len(set(rows)) == len(rows)
    layout = Layout(Path("data"), Path("out"))
    assert len({layout.bundle("docdoc", r) for r in RECIPES}) == len(RECIPES)
    for recipe in RECIPES:
        assert recipe.kind in REGISTRY or recipe.kind in FITTED, recipe
        assert recipe.init is None or recipe.init in rows, recipe


def test_every_recipe_makes_valid_training_settings(tmp_path: Path) -> None:
    """Each row's flags, on each setting's data flags, are accepted by `ssi train`'s settings."""
    layout = Layout(tmp_path, tmp_path / "out")
    fields = {name: (field.alias or name) for name, field in TrainSettings.model_fields.items()}
    flag_to_field = {"--" + name.replace("_", "-"): name for name in fields}
    flag_to_field.update({"--dims": "n_dims", "--vocab-size": "vocab_size"})
    for setting in ("docdoc", "unseen", "crosslang"):
        for recipe in RECIPES:
            if setting == "crosslang" and not recipe.crosslang:
                continue
            args = [*task_flags(layout, setting), *recipe.flags]
            values = _parse(args, flag_to_field)
            TrainSettings(kind=recipe.kind, out=tmp_path / "b", **values)


def _parse(args: list[str], flag_to_field: dict[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        assert flag in flag_to_field, f"unknown flag {flag}"
        values[flag_to_field[flag]] = value
    return values
