"""`ssi train --lexical bm25|tfidf` and the choice made when it is not given (training.run.resolve_lexical)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import Stemmer
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import read_corpus
from ssi.tokenize import tokenize
from ssi_cli.main import build_app
from tests.training.synonyms import SynonymCorpus, held_out_map, train
from training.click_recipe import CLICK_RECIPE
from training.run import SELF_PAIR_RECIPE, resolve_lexical, resolve_recipe
from training.settings import TrainSettings


def test_an_sgd_kind_weighs_by_bm25_unless_told_and_keeps_every_word(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    train(synonyms, tmp_path / "auto", "--epochs", "2", "--dims", "8")
    train(synonyms, tmp_path / "tfidf", "--epochs", "2", "--dims", "8", "--lexical", "tfidf")
    auto, tfidf = load_bundle(tmp_path / "auto"), load_bundle(tmp_path / "tfidf")
    assert auto.vocab.lexical == "bm25" and auto.manifest.lexical is not None
    assert tfidf.vocab.lexical == "tfidf" and tfidf.manifest.lexical is None
    # BM25 keeps the words of one document (min_df 1); the semantic part learns the 30,000 most frequent at most.
    english = Stemmer.Stemmer("english")  # and every word is its stem unless told (training.run.resolve_stemmer)
    words = {w for d in read_corpus(synonyms.corpus) for w in tokenize(d.full_text)}
    assert set(auto.vocab.words) == {english.stemWord(w) for w in words} and auto.vocab.stemmer == "english"
    assert tfidf.vocab.stemmer == "english"
    settings = TrainSettings(corpus=synonyms.corpus, out=tmp_path / "x", pairs=synonyms.train_pairs)
    bm25, plain = resolve_lexical(settings), resolve_lexical(settings.model_copy(update={"lexical": "tfidf"}))
    assert (bm25.min_df, bm25.frequent_words) == (1, 30_000) and (plain.min_df, plain.vocab_size) == (2, 30_000)
    assert auto.manifest.training["config"]["lexical"] == "bm25"
    lengths = [len(tokenize(d.full_text)) for d in read_corpus(synonyms.corpus)]
    assert auto.vocab.bm25 is not None and auto.vocab.bm25.avg_len == pytest.approx(np.mean(lengths))


def test_a_bm25_model_learns_on_top_and_trainer_and_harness_agree(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    summary = train(synonyms, tmp_path / "b", "--epochs", "40", "--dims", "16", "--lr", "0.1", "--lexical", "bm25")
    learned, tfidf = held_out_map(synonyms, tmp_path / "b")
    assert learned > 0.8 and learned > 8 * tfidf
    assert summary["valid"]["map"] == pytest.approx(learned, abs=1e-6)
    history = load_bundle(tmp_path / "b").manifest.training["history"]
    assert history[0]["step"] == 0 and summary["valid"]["map"] > history[0]["map"] + 0.5  # from the BM25 start


@pytest.mark.parametrize("kind", ["lsa", "plsa", "translation"])
def test_kinds_built_on_tfidf_keep_it_and_refuse_bm25(synonyms: SynonymCorpus, tmp_path: Path, kind: str) -> None:
    base = TrainSettings(corpus=synonyms.corpus, out=tmp_path / "x", pairs=synonyms.train_pairs, kind=kind)
    assert resolve_lexical(base).lexical == "tfidf"
    told = base.model_copy(update={"lexical": "bm25"})
    with pytest.raises(ValueError, match=f"--lexical bm25 does not go with --kind {kind}"):
        resolve_lexical(told)


def test_the_cli_names_what_it_cannot_do(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    train(synonyms, tmp_path / "bm25", "--epochs", "1", "--dims", "8")
    base = ["train", "--corpus", str(synonyms.corpus), "--pairs", str(synonyms.train_pairs), "--no-progress"]
    runner = CliRunner()
    warm = runner.invoke(
        build_app(), [*base, "--out", str(tmp_path / "w"), "--init-from", str(tmp_path / "bm25"), "--lexical", "tfidf"]
    )
    assert warm.exit_code == 2 and "weighs its lexical part by bm25" in warm.output
    knobs = runner.invoke(build_app(), [*base, "--out", str(tmp_path / "k"), "--lexical", "tfidf", "--bm25-k1", "2"])
    assert knobs.exit_code != 0 and "--bm25-k1" in knobs.output
    bad = runner.invoke(build_app(), [*base, "--out", str(tmp_path / "b"), "--lexical", "bm26"])
    assert bad.exit_code != 0 and "lexical" in bad.output
    stem = runner.invoke(build_app(), [*base, "--out", str(tmp_path / "s"), "--stemmer", "klingon"])
    assert stem.exit_code != 0 and "unknown stemmer 'klingon'" in stem.output and "english" in stem.output
    warm_stem = runner.invoke(
        build_app(), [*base, "--out", str(tmp_path / "w"), "--init-from", str(tmp_path / "bm25"), "--stemmer", "none"]
    )
    assert warm_stem.exit_code == 2 and "stems its words with english" in warm_stem.output
    assert not any((tmp_path / name).exists() for name in ("w", "b", "s"))


def test_words_are_stemmed_unless_told_or_the_kind_reads_them_as_they_are(tmp_path: Path) -> None:
    def resolved(**given: object) -> TrainSettings:
        return resolve_lexical(TrainSettings(corpus="c.jsonl", out="b", pairs="p.tsv", **given))

    assert resolved().stemmer == "english" and resolved(kind="lsa").stemmer == "english"
    assert resolved(stemmer="none").stemmer == "none" and resolved(stemmer="porter").stemmer == "porter"
    assert resolved(kind="cfh", frequent_words=100).stemmer == "none"


def test_cfh_does_not_warm_start_from_stems(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    train(synonyms, tmp_path / "stemmed", "--epochs", "1", "--dims", "8", "--lexical", "tfidf")
    base = ["train", "--corpus", str(synonyms.corpus), "--pairs", str(synonyms.train_pairs), "--no-progress"]
    warm = CliRunner().invoke(
        build_app(),
        [*base, "--out", str(tmp_path / "c"), "--kind", "cfh", "--frequent-words", "20"]
        + ["--init-from", str(tmp_path / "stemmed")],
    )
    assert warm.exit_code == 2 and "--stemmer none" in warm.output and not (tmp_path / "c").exists()
    with pytest.raises(ValueError, match="--stemmer english does not go with --kind cfh"):
        TrainSettings(corpus="c.jsonl", out="b", pairs="p.tsv", kind="cfh", frequent_words=100, stemmer="english")


def test_pairs_cut_from_the_corpus_get_the_no_label_recipe_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolved(**given: object) -> TrainSettings:
        return resolve_recipe(resolve_lexical(TrainSettings(corpus="c.jsonl", out="b", **given)))

    plain = resolved(self_pairs="title")
    assert (plain.lr, plain.margin, plain.n_dims) == tuple(SELF_PAIR_RECIPE[k] for k in ("lr", "margin", "n_dims"))
    told = resolved(self_pairs="title", margin=1.0, n_dims=100)
    assert (told.lr, told.margin, told.n_dims) == (SELF_PAIR_RECIPE["lr"], 1.0, 100)
    monkeypatch.setenv("SSI_TRAIN_LR", "0.2")  # the environment counts as telling
    assert resolved(self_pairs="title").lr == 0.2
    monkeypatch.delenv("SSI_TRAIN_LR")
    defaults = TrainSettings(corpus="c.jsonl", out="b", pairs="p.tsv")
    for other in (resolved(pairs="p.tsv"), resolved(self_pairs="title", lexical="tfidf")):
        assert (other.lr, other.margin, other.n_dims) == (defaults.lr, defaults.margin, defaults.n_dims)


def test_a_click_log_gets_the_click_recipe_unless_told() -> None:
    def resolved(**given: object) -> TrainSettings:
        return resolve_recipe(resolve_lexical(TrainSettings(corpus="c.jsonl", out="b", **given)))

    default = TrainSettings.model_fields["init_scale"].default
    assert CLICK_RECIPE.init_scale < default
    assert resolved(clicks="log.jsonl").init_scale == CLICK_RECIPE.init_scale
    assert resolved(clicks="log.jsonl", queries="q.jsonl", qrels="r.tsv").init_scale == CLICK_RECIPE.init_scale
    assert resolved(clicks="log.jsonl", init_scale=0.2).init_scale == 0.2
    assert resolved(clicks="log.jsonl").ensemble == CLICK_RECIPE.ensemble > 1
    assert resolved(clicks="log.jsonl", ensemble=1).ensemble == 1
    # the other sources, another base or form, and a warm start (its U is the bundle's) keep the default
    for other in (
        resolved(pairs="p.tsv"),
        resolved(queries="q.jsonl", qrels="r.tsv"),
        resolved(clicks="log.jsonl", lexical="tfidf"),
        resolved(clicks="log.jsonl", kind="symmetric"),
    ):
        assert other.init_scale == default and other.ensemble == 1


def test_a_click_log_trains_the_recipes_epochs_unless_a_budget_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three members of ten minutes each would be half an hour: a click log on the BM25 base trains the loop's
    epochs instead, while a budget given (a flag or SSI_TRAIN_*) wins and the other sources keep ten minutes."""

    def budget(**given: object) -> tuple[float | None, float | None]:
        settings = resolve_recipe(resolve_lexical(TrainSettings(corpus="c.jsonl", out="b", **given)))
        return settings.epochs, settings.max_minutes

    assert budget(clicks="log.jsonl") == (CLICK_RECIPE.epochs, None)
    assert budget(clicks="log.jsonl", epochs=2.0) == (2.0, None)
    assert budget(clicks="log.jsonl", max_minutes=3.0) == (None, 3.0)
    monkeypatch.setenv("SSI_TRAIN_MAX_MINUTES", "4")  # the environment counts as telling
    assert budget(clicks="log.jsonl") == (None, 4.0)
    monkeypatch.delenv("SSI_TRAIN_MAX_MINUTES")
    assert budget(pairs="p.tsv") == budget(clicks="log.jsonl", lexical="tfidf") == (None, 10.0)
