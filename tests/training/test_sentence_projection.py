"""`ssi train --encoder M --sentence-dims E`: the encoder's vectors cut to E dimensions (training.sentence_projection).
The bundle carries and checks the projection; queries and documents are scored by the cut vectors (the corpus
documents' mean taken away, their leading principal axes, unit length), in the day-one bundle and in one trained on
pairs; the sentence-vector cache serves every cut of one encoder; a next model keeps the cut; a size it cannot cut to
is refused with a clear error and nothing written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import ssi
from ssi.bundle import load_bundle
from ssi.corpus import read_corpus
from ssi.hybrid import hybrid_scores
from ssi.sentence import PROJECTION_FILE, SentenceEncoder
from ssi_cli.main import build_app
from tests.training.sentence_testing import ExportedEncoder, exported_tiny_encoder, write_word_corpus
from tests.training.synonyms import SynonymCorpus, train
from training.evaluate.form_scorer import FormScorer
from training.sentence_vectors import encode_corpus

DIMS = 8  # of the tiny encoder's 32
QUERIES = ["star planet", "oven bread music", "violin", "the dna of a cell in the sea"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> ExportedEncoder:
    return exported_tiny_encoder(tmp_path_factory)


@pytest.fixture(scope="module")
def world(shared: ExportedEncoder, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A corpus and the day-one bundle trained on it with the tiny encoder cut to DIMS."""
    root = tmp_path_factory.mktemp("projection")
    corpus = write_word_corpus(root / "corpus.jsonl", seed=5)
    args = ["train", "--corpus", str(corpus), "--encoder", str(shared.model), "--sentence-dims", str(DIMS)]
    result = CliRunner().invoke(build_app(), [*args, "--out", str(root / "bundle"), "--no-progress"])
    assert result.exit_code == 0, result.output
    return {"root": root, "corpus": corpus, "bundle": root / "bundle"}


def cut_by_hand(pooled_docs: np.ndarray, vectors: np.ndarray, dims: int) -> np.ndarray:
    """The cut written out apart from training.sentence_projection: numpy's SVD of the documents about their mean."""
    mean = pooled_docs.astype(np.float64).mean(axis=0)
    _, _, axes = np.linalg.svd(pooled_docs - mean, full_matrices=False)
    cut = (vectors - mean) @ axes[:dims].T
    return cut / np.linalg.norm(cut, axis=1, keepdims=True)


def test_the_day_one_bundle_scores_by_the_cut_vectors(world: dict[str, Path]) -> None:
    bundle = load_bundle(world["bundle"])  # every file checked against the manifest's sha256, the projection's too
    spec = bundle.sentence
    assert spec is not None and spec.projection is not None
    assert f"sentence/{PROJECTION_FILE}" in bundle.manifest.files
    assert spec.dims == DIMS and spec.projection.source_dims == 32 and spec.projection.documents == 40
    assert 0.0 < spec.projection.kept_variance < 1.0 and bundle.manifest.index_dims == 1 + DIMS
    docs = read_corpus(world["corpus"])
    texts = [d.full_text for d in docs]
    encoder = SentenceEncoder(bundle.sentence_path)
    pooled_docs, pooled_queries = encoder.encode(texts, cut=False), encoder.encode(QUERIES, cut=False)
    assert pooled_docs.shape == (40, 32) and encoder.encode(texts).shape == (40, DIMS)
    # The cut's cosines are the hand-made ones (an axis's sign is SVD's choice: cosines do not see it).
    want_docs, want_queries = (
        cut_by_hand(pooled_docs, pooled_docs, DIMS),
        cut_by_hand(pooled_docs, pooled_queries, DIMS),
    )
    assert np.allclose(encoder.encode(QUERIES) @ encoder.encode(texts).T, want_queries @ want_docs.T, atol=1e-5)
    lexical = FormScorer(bundle.vocab, bundle.form, docs).score(QUERIES)
    expected = hybrid_scores(lexical, want_queries, want_docs, spec.weight)
    whole = hybrid_scores(lexical, pooled_queries, pooled_docs, spec.weight)
    assert not np.allclose(expected, whole, atol=1e-3)  # the test tells the cut from the whole vectors
    assert np.allclose(FormScorer.from_bundle(bundle, docs).score(QUERIES), expected, atol=1e-5)
    assert np.allclose(ssi.load(world["bundle"], corpus=world["corpus"]).scores(QUERIES), expected, atol=1e-5)
    # The sentence-vector cache keeps the vectors before the cut and cuts them on the way out.
    assert np.allclose(encode_corpus(encoder, texts), encoder.encode(texts), atol=1e-6)


def test_pairs_train_with_the_cut_and_a_next_model_keeps_it(
    synonyms: SynonymCorpus, shared: ExportedEncoder, tmp_path: Path
) -> None:
    args = ("--epochs", "2", "--dims", "8", "--lr", "0.1", "--encoder", str(shared.model))
    train(synonyms, tmp_path / "b", *args, "--sentence-dims", str(DIMS))
    bundle = load_bundle(tmp_path / "b")
    assert bundle.sentence is not None and bundle.sentence.projection is not None
    assert bundle.sentence.dims == DIMS and bundle.manifest.index_dims == 8 + DIMS
    texts = [d.full_text for d in read_corpus(synonyms.corpus)]
    pooled = SentenceEncoder(bundle.sentence_path).encode(texts, cut=False)
    cut = SentenceEncoder(bundle.sentence_path).encode(texts)
    assert np.allclose(cut @ cut.T, cut_by_hand(pooled, pooled, DIMS) @ cut_by_hand(pooled, pooled, DIMS).T, atol=1e-5)
    train(synonyms, tmp_path / "next", "--epochs", "1", "--dims", "8", "--encoder", str(tmp_path / "b"))
    after = load_bundle(tmp_path / "next")
    assert after.sentence is not None and after.sentence.projection == bundle.sentence.projection
    assert (after.sentence_path / PROJECTION_FILE).read_bytes() == (bundle.sentence_path / PROJECTION_FILE).read_bytes()


def test_a_size_it_cannot_cut_to_is_refused(world: dict[str, Path], shared: ExportedEncoder, tmp_path: Path) -> None:
    base = ["train", "--corpus", str(world["corpus"]), "--no-progress"]
    cases = {
        "give 2 to 31": ["--encoder", str(shared.model), "--sentence-dims", "32"],
        "cut to 8 dimensions already": ["--encoder", str(world["bundle"]), "--sentence-dims", "4"],
        "--sentence-dims cuts the --encoder's vectors": ["--self-pairs", "title", "--sentence-dims", "8"],
    }
    for i, (message, flags) in enumerate(cases.items()):
        result = CliRunner().invoke(build_app(), [*base, *flags, "--out", str(tmp_path / f"b{i}")])
        said = " ".join(result.output.replace("│", " ").split())  # unwrapped from the error panel's lines
        assert result.exit_code == 2 and message in said and "Traceback" not in said, result.output
        assert not (tmp_path / f"b{i}").exists()
