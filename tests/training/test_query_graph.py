"""`ssi train --encoder M --query-model Q`: a smaller graph, distilled towards M, encodes the queries while M encodes
the documents (ssi.sentence's query graph). The bundle carries and checks both graphs, scores queries by the query
graph against the documents' M vectors, a next model keeps it, and a model that does not match M is refused with a
clear error and nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import ssi
from ssi.bundle import load_bundle
from ssi.corpus import read_corpus
from ssi.hybrid import hybrid_scores
from ssi.sentence import QUERY_INT8_MODEL_FILE, QUERY_MODEL_FILE, SentenceEncoder
from ssi_cli.main import build_app
from tests.training.sentence_testing import (
    WORDS,
    ExportedEncoder,
    exported_query_model,
    exported_tiny_encoder,
    make_tiny_encoder,
    write_word_corpus,
)
from training.evaluate.form_scorer import FormScorer
from training.sentence_export import MIN_COSINE, MIN_QUERY_AGREEMENT, _reference_model, cosines, reference_vectors
from training.sentence_vectors import encode_corpus
from training.static_query import distil_table, static_query_model

QUERIES = ["star planet", "oven bread music", "violin", "the dna of a cell in the sea"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> ExportedEncoder:
    return exported_tiny_encoder(tmp_path_factory)


@pytest.fixture(scope="module")
def world(shared: ExportedEncoder, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A corpus, a query model for the tiny encoder, and the day-one bundle trained with both."""
    root = tmp_path_factory.mktemp("query-graph")
    corpus = write_word_corpus(root / "corpus.jsonl", seed=3)
    query_model = exported_query_model(tmp_path_factory)
    args = ["train", "--corpus", str(corpus), "--encoder", str(shared.model), "--query-model", str(query_model)]
    result = CliRunner().invoke(build_app(), [*args, "--out", str(root / "bundle"), "--no-progress"])
    assert result.exit_code == 0, result.output
    return {"root": root, "corpus": corpus, "query_model": query_model, "bundle": root / "bundle"}


def test_queries_are_encoded_by_the_query_graph_and_documents_by_the_encoder(world: dict[str, Path]) -> None:
    bundle = load_bundle(world["bundle"])  # every file checked against the manifest's sha256, the query graph's too
    spec = bundle.sentence
    assert spec is not None and spec.query is not None
    assert f"sentence/{QUERY_MODEL_FILE}" in bundle.manifest.files
    assert spec.query.name.endswith("first 1 of 2 layers") and spec.query.source
    assert MIN_QUERY_AGREEMENT <= spec.query.agreement.mean_cosine < 0.99  # near the encoder, not the same
    documents = SentenceEncoder(bundle.sentence_path)
    queries = SentenceEncoder(bundle.sentence_path, part="query")
    # The query graph is the query model's own forward pass, exported and checked.
    want = reference_vectors(_reference_model(world["query_model"]), queries, QUERIES)
    assert cosines(queries.encode(QUERIES), want).min() >= MIN_COSINE
    docs = read_corpus(world["corpus"])
    texts = [d.full_text for d in docs]
    lexical = FormScorer(bundle.vocab, bundle.form, docs).score(QUERIES)
    expected = hybrid_scores(lexical, queries.encode(QUERIES), documents.encode(texts), spec.weight)
    by_documents_graph = hybrid_scores(lexical, documents.encode(QUERIES), documents.encode(texts), spec.weight)
    assert not np.allclose(expected, by_documents_graph, atol=1e-4)  # the test tells the two graphs apart
    assert np.allclose(FormScorer.from_bundle(bundle, docs).score(QUERIES), expected, atol=1e-5)
    assert np.allclose(ssi.load(world["bundle"], corpus=world["corpus"]).scores(QUERIES), expected, atol=1e-5)
    # The sentence-vector cache tells the two graphs apart for the same texts.
    assert not np.allclose(encode_corpus(queries, QUERIES), encode_corpus(documents, QUERIES), atol=1e-4)


def test_a_next_model_trained_on_the_bundles_encoder_keeps_its_query_graph(world: dict[str, Path]) -> None:
    out = world["root"] / "next"
    args = ["train", "--corpus", str(world["corpus"]), "--encoder", str(world["bundle"]), "--out", str(out)]
    result = CliRunner().invoke(build_app(), [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    before, after = load_bundle(world["bundle"]), load_bundle(out)
    assert after.sentence is not None and before.sentence is not None
    assert after.sentence.query == before.sentence.query
    for name in (QUERY_MODEL_FILE, "model.onnx"):
        assert (after.sentence_path / name).read_bytes() == (before.sentence_path / name).read_bytes()


def test_a_query_model_that_does_not_match_the_encoder_is_refused(
    world: dict[str, Path], shared: ExportedEncoder, tmp_path: Path
) -> None:
    other = make_tiny_encoder(tmp_path / "other", seed=1)  # same tokenizer, other weights: far from the encoder
    retokenized = shutil.copytree(world["query_model"], tmp_path / "retokenized", copy_function=shutil.copyfile)
    tokenizer = json.loads((retokenized / "tokenizer.json").read_text())
    tokenizer["normalizer"]["lowercase"] = False
    (retokenized / "tokenizer.json").write_text(json.dumps(tokenizer))
    base = ["train", "--corpus", str(world["corpus"]), "--no-progress"]
    cases = {
        "far from those of the encoder": ["--encoder", str(shared.model), "--query-model", str(other)],
        "its tokenizer is not the encoder's": ["--encoder", str(shared.model), "--query-model", str(retokenized)],
        "--query-model encodes queries beside an --encoder": ["--self-pairs", "title", "--query-model", str(other)],
        # An encoder folder, but a transformer's, not a table.
        "or a static one (python": ["--encoder", str(shared.model), "--query-model", str(shared.sentence)],
    }
    for i, (message, flags) in enumerate(cases.items()):
        result = CliRunner().invoke(build_app(), [*base, *flags, "--out", str(tmp_path / f"b{i}")])
        said = " ".join(result.output.replace("│", " ").split())  # unwrapped from the error panel's lines
        assert result.exit_code == 2 and message in said and "Traceback" not in said, result.output
        assert not (tmp_path / f"b{i}").exists()


def test_distillation_fits_a_table_whose_mean_rows_land_on_the_targets() -> None:
    """distil_table on a problem with a known answer: targets made by a hidden table from random bags of its tokens.
    From a random start, the held-out texts' cosine must rise to near 1 (a table can give them exactly)."""
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(60, 8)).astype(np.float32)
    special = np.asarray([0, 1])
    hidden[special] = 0.0
    bags = [[0, *rng.integers(2, 60, size=int(rng.integers(1, 6))).tolist(), 1] for _ in range(2000)]
    target = np.stack([hidden[[t for t in bag if t > 1]].mean(axis=0) for bag in bags])
    target /= np.linalg.norm(target, axis=1, keepdims=True)
    start = rng.normal(size=hidden.shape).astype(np.float32)
    table, info = distil_table(start, special, bags, target, epochs=20, lr=3e-2, batch=128, threads=1)
    assert info["held_out_cosine_before"] < 0.5 and info["held_out_cosine_after"] > 0.97, info
    assert info["loss_by_epoch"][-1] < info["loss_by_epoch"][0] and not table[special].any()


def test_a_static_query_graph_encodes_the_queries_of_a_bundle_and_serves_without_int8(
    world: dict[str, Path], shared: ExportedEncoder, tmp_path: Path
) -> None:
    """`python -m training.static_query` writes a static folder distilled towards the encoder, which `--query-model`
    takes as it is: the bundle's query graph is its one-Gather graph, queries are scored by it against the documents'
    encoder vectors, and it serves fp32 queries whatever the document graph's precision (nothing to quantize)."""
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 9)))) for _ in range(400)]
    static = tmp_path / "static-queries"
    spec, info = static_query_model(shared.model, static, texts, epochs=4, threads=1)
    assert spec.kind == "static" and spec.static is not None and spec.static.distilled
    assert info["held_out_cosine_after"] > info["held_out_cosine_before"]
    args = ["train", "--corpus", str(world["corpus"]), "--encoder", str(shared.model), "--query-model", str(static)]
    result = CliRunner().invoke(build_app(), [*args, "--out", str(tmp_path / "bundle"), "--no-progress"])
    assert result.exit_code == 0, result.output
    bundle = load_bundle(tmp_path / "bundle")
    assert bundle.sentence is not None and bundle.sentence.query is not None
    assert bundle.sentence.query.kind == "static" and bundle.sentence.query.int8 is None
    assert MIN_QUERY_AGREEMENT <= bundle.sentence.query.agreement.mean_cosine
    assert (bundle.sentence_path / QUERY_MODEL_FILE).read_bytes() == (static / "model.onnx").read_bytes()
    assert not (bundle.sentence_path / QUERY_INT8_MODEL_FILE).exists()
    queries = SentenceEncoder(bundle.sentence_path, part="query", precision="int8")
    assert queries.precision == "fp32"
    documents = SentenceEncoder(bundle.sentence_path)
    docs = read_corpus(world["corpus"])
    lexical = FormScorer(bundle.vocab, bundle.form, docs).score(QUERIES)
    doc_vectors = documents.encode([d.full_text for d in docs])
    expected = hybrid_scores(lexical, SentenceEncoder(static).encode(QUERIES), doc_vectors, bundle.sentence.weight)
    by_documents_graph = hybrid_scores(lexical, documents.encode(QUERIES), doc_vectors, bundle.sentence.weight)
    assert not np.allclose(expected, by_documents_graph, atol=1e-4)
    assert np.allclose(ssi.load(tmp_path / "bundle", corpus=world["corpus"]).scores(QUERIES), expected, atol=1e-5)


def test_the_static_distillation_names_a_missing_corpus_and_writes_nothing(
    shared: ExportedEncoder, tmp_path: Path
) -> None:
    import typer

    from training.static_query import main

    app = typer.Typer()
    app.command()(main)
    out = tmp_path / "static"
    # rich wraps its error box at the terminal's width (narrow here, as on any CI), so the path is read unwrapped.
    result = CliRunner().invoke(
        app, [str(shared.model), str(out), "--texts", str(tmp_path / "nowhere.jsonl")], env={"COLUMNS": "70"}
    )
    said = " ".join(result.output.replace("│", " ").split())
    unwrapped = "".join(said.split())
    assert result.exit_code == 2 and "nowhere.jsonl" in unwrapped and "nosuchcorpusfile" in unwrapped, said
    assert "Traceback" not in said
    assert not out.exists()
