"""`ssi train --encoder`: the sentence encoder exported and checked against its model, the day-one hybrid
(BM25 + the encoder, nothing learned), λ learned with U and V from pairs, a hybrid bundle's encoder taken over by
the next model and by the click-learning round's candidates, and the real all-MiniLM-L6-v2."""

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
from ssi.forms.diagonal import Diagonal
from ssi.hybrid import hybrid_scores
from ssi.sentence import SentenceEncoder, SentenceError, bulk_encoder, read_spec
from ssi_cli.main import build_app
from tests.training.sentence_testing import WORDS, ExportedEncoder, exported_tiny_encoder, make_tiny_encoder
from tests.training.synonyms import SynonymCorpus, held_out_map, train
from training.evaluate.form_scorer import FormScorer
from training.hybrid import DAY_ONE_WEIGHT, LEARNED_RULE, SENTENCE_WEIGHT
from training.pretrained import NAME, REVISION, UPSTREAM_SHA256, minilm_folder
from training.sentence_export import (
    MIN_COSINE,
    MIN_INT8_COSINE,
    _reference_model,
    cosines,
    prepare_encoder,
    reference_vectors,
)
from training.sentence_vectors import CACHE_ENV, encode_corpus

TEXTS = ["the star and the planet", "bread dough in the oven", "a song for piano and violin", "dna " * 30, "x"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> ExportedEncoder:
    """The run's tiny encoder, exported once for every module and worker (sentence_testing.exported_tiny_encoder)."""
    return exported_tiny_encoder(tmp_path_factory)


@pytest.fixture(scope="module")
def tiny(shared: ExportedEncoder) -> Path:
    """Its model folder with the graph beside the weights: `--encoder` takes that graph after the check, so a
    training run does not export again (the fine-tuning test still exports its tuned model)."""
    return shared.model


@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_the_exported_graph_gives_the_models_own_vectors(shared: ExportedEncoder, tmp_path: Path, pooling: str) -> None:
    """Pooling and normalisation as the folder's configuration says, against PyTorch's forward pass. Mean: the
    run's shared export from the weights (made by the same prepare_encoder from a folder without a graph). Cls and
    max: the same weights under another pooling configuration, with that graph beside them (the graph gives the
    token states; pooling and normalisation run after it, ssi.sentence), taken after the same check."""
    if pooling == "mean":
        folder, out = shared.model, shared.sentence
        spec = read_spec(out)
    else:
        out = tmp_path / "out"
        folder = make_tiny_encoder(tmp_path / "model", pooling=pooling, normalize=pooling != "max")
        (folder / "onnx").mkdir()
        shutil.copyfile(shared.model / "onnx" / "model.onnx", folder / "onnx" / "model.onnx")
        spec = prepare_encoder(folder, out, int8=False)
    assert (spec.pooling, spec.normalize, spec.dims, spec.max_length) == (pooling, pooling != "max", 32, 48)
    taken = set() if pooling == "mean" else {"onnx/model.onnx"}
    assert (
        spec.license == "apache-2.0"
        and set(spec.source) == {"model.safetensors", "tokenizer.json", "config.json"} | taken
    )
    encoder = SentenceEncoder(out, precision="fp32")  # the graph checked against the model (int8 serves by default)
    got = encoder.encode(TEXTS)
    want = reference_vectors(_reference_model(folder), encoder, TEXTS)
    assert cosines(got, want).min() >= MIN_COSINE
    norms = np.linalg.norm(got, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5) == spec.normalize
    # One text alone or among others of other lengths: the same vector (padding is masked).
    assert np.allclose(encoder.encode(TEXTS[:1])[0], got[0], atol=1e-5)


def test_a_graph_that_is_not_the_models_is_refused(shared: ExportedEncoder, tmp_path: Path) -> None:
    """A folder's own onnx/model.onnx is taken as it is (no export: what `--encoder` does with the shared folder);
    one that came from other weights (seed 0's graph beside seed 7's weights): the check against the model refuses
    it."""
    spec = prepare_encoder(shared.model, tmp_path / "taken")
    assert (tmp_path / "taken" / "model.onnx").read_bytes() == (shared.model / "onnx" / "model.onnx").read_bytes()
    assert spec.model_dump(exclude={"source"}) == read_spec(shared.sentence).model_dump(exclude={"source"})
    assert spec.source == {**read_spec(shared.sentence).source, "onnx/model.onnx": spec.source["onnx/model.onnx"]}
    folder = make_tiny_encoder(tmp_path / "mixed", seed=7)
    (folder / "onnx").mkdir()
    shutil.copyfile(shared.model / "onnx" / "model.onnx", folder / "onnx" / "model.onnx")
    with pytest.raises(SentenceError, match="differ from the model's own"):
        prepare_encoder(folder, tmp_path / "out")


def test_the_int8_graph_is_written_recorded_and_close_to_the_fp32_one(shared: ExportedEncoder) -> None:
    """The export writes the int8 graph beside the fp32 one, records its check (least and mean cosine to fp32 over the
    probe texts) and records it as the graph that serves; on other texts its vectors stay within the bound too."""
    spec = read_spec(shared.sentence)
    assert spec.precision == "int8" and spec.int8 is not None
    assert (shared.sentence / "model.int8.onnx").stat().st_size < (shared.sentence / "model.onnx").stat().st_size
    assert MIN_INT8_COSINE <= spec.int8.min_cosine <= spec.int8.mean_cosine <= 1.0 + 1e-6
    assert spec.int8.bound == MIN_INT8_COSINE and "per channel" in spec.int8.method
    fp32, int8 = SentenceEncoder(shared.sentence, precision="fp32"), SentenceEncoder(shared.sentence, precision="int8")
    assert (fp32.precision, int8.precision) == ("fp32", "int8")
    batched = int8.encode(TEXTS)
    found = cosines(batched, fp32.encode(TEXTS))
    assert found.min() >= MIN_INT8_COSINE and found.min() < 1.0 - 1e-6  # close, and not the same graph
    # Its activations are quantized token by token: a text's vector is the same in any batch (a query's ranking does
    # not move with the queries that share its batch).
    assert spec.int8.activations == "token"
    np.testing.assert_allclose(np.vstack([int8.encode([text]) for text in TEXTS]), batched, atol=1e-6)
    # Texts in bulk (a first start's documents): calls of at most 12 tokens (so each of the short texts has its own or
    # shares with one other) on three one-thread sessions at once, the same vectors.
    bulk = bulk_encoder(shared.sentence, 3, "int8")
    assert len(bulk.sessions) == 3 and bulk.precision == "int8"
    np.testing.assert_allclose(bulk.encode(TEXTS * 4, tokens=12), np.vstack([batched] * 4), atol=1e-6)


def test_an_int8_graph_of_a_bundle_written_before_token_scales_still_serves(
    shared: ExportedEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle's int8 graph from onnxruntime's dynamic quantization as it comes (one activation scale a batch), its
    record written without `activations`: it loads, with onnxruntime's fusions, and keeps its vectors within bound;
    the corpus cache never hands its vectors to the new graph of the same weights."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = shutil.copytree(shared.sentence, tmp_path / "sentence")
    (folder / "model.int8.onnx").chmod(0o644)
    quantize_dynamic(folder / "model.onnx", folder / "model.int8.onnx", per_channel=True, weight_type=QuantType.QInt8)
    written = json.loads((folder / "sentence.json").read_text(encoding="utf-8"))
    del written["int8"]["activations"]
    (folder / "sentence.json").write_text(json.dumps(written), encoding="utf-8")
    assert read_spec(folder).int8.activations == "tensor"
    old, fp32 = SentenceEncoder(folder, precision="int8"), SentenceEncoder(folder, precision="fp32")
    assert cosines(old.encode(TEXTS), fp32.encode(TEXTS)).min() >= MIN_INT8_COSINE
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    new = SentenceEncoder(shared.sentence, precision="int8")
    assert not np.allclose(encode_corpus(old, TEXTS), new.encode(TEXTS), atol=1e-6)  # two graphs, two answers
    np.testing.assert_array_equal(encode_corpus(new, TEXTS), new.encode(TEXTS))


def test_a_folder_that_is_no_model_gets_a_clear_cli_error(tmp_path: Path, synonyms: SynonymCorpus) -> None:
    (tmp_path / "empty").mkdir()
    args = [
        "train",
        "--corpus",
        str(synonyms.corpus),
        "--encoder",
        str(tmp_path / "empty"),
        "--out",
        str(tmp_path / "b"),
    ]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 2 and "tokenizer.json" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "b").exists()


def test_day_one_is_bm25_plus_the_encoder_at_weight_one(tiny: Path, tmp_path: Path) -> None:
    """No pairs: the bundle ranks by BM25 (the diagonal form, every weight 1) + 1 · e(q)·e(d), exactly."""
    corpus = tmp_path / "corpus.jsonl"
    rng = np.random.default_rng(3)
    lines = [{"id": f"d{i}", "title": "", "text": " ".join(rng.choice(WORDS, size=12))} for i in range(40)]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    args = ["train", "--corpus", str(corpus), "--encoder", str(tiny), "--out", str(tmp_path / "b"), "--no-progress"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    bundle = load_bundle(tmp_path / "b")
    assert isinstance(bundle.form, Diagonal) and np.all(bundle.form.values["w"] == 1.0)
    assert bundle.sentence is not None and bundle.sentence.weight == DAY_ONE_WEIGHT
    assert bundle.vocab.lexical == "bm25" and bundle.manifest.index_dims == 1 + 32
    docs = read_corpus(corpus)
    scorer = FormScorer.from_bundle(bundle, docs)
    queries = ["star planet", "oven bread music", "violin"]
    lexical = FormScorer(bundle.vocab, bundle.form, docs).score(queries)
    encoder = SentenceEncoder(bundle.sentence_path)
    expected = hybrid_scores(lexical, encoder.encode(queries), encoder.encode([d.full_text for d in docs]), 1.0)
    assert np.allclose(scorer.score(queries), expected, atol=1e-5)
    assert not np.allclose(expected, lexical, atol=1e-3)
    model = ssi.load(tmp_path / "b", corpus=corpus)  # in process: the same hybrid score
    assert np.allclose(model.scores(queries), expected, atol=1e-5)
    assert np.allclose(model.score(queries, docs), expected, atol=1e-5)


def test_pairs_learn_the_weight_with_u_and_v(synonyms: SynonymCorpus, tiny: Path, tmp_path: Path) -> None:
    """λ moves from its day-one value by the same loss as U and V, the bundle keeps the validation-chosen step's,
    and the trainer's validation and the evaluation harness rank the hybrid alike.

    Slow: checks the encoder's graph and encodes the corpus before training, then evaluates the bundle, then trains
    twice more with its encoder."""
    summary = train(synonyms, tmp_path / "b", "--epochs", "20", "--dims", "16", "--lr", "0.1", "--encoder", str(tiny))
    bundle = load_bundle(tmp_path / "b")
    assert bundle.sentence is not None and bundle.sentence.weight_rule == LEARNED_RULE
    assert bundle.sentence.weight == pytest.approx(summary["valid"][SENTENCE_WEIGHT])
    assert bundle.sentence.weight >= 0.0 and bundle.sentence.weight != DAY_ONE_WEIGHT
    learned, tfidf = held_out_map(synonyms, tmp_path / "b")
    assert summary["valid"]["map"] == pytest.approx(learned, abs=1e-5)
    assert learned > 0.8 > 8 * tfidf  # the learned parts still find the synonyms the encoder cannot know
    taken_over_by_the_next_model(synonyms, tmp_path / "b", tmp_path)


def taken_over_by_the_next_model(synonyms: SynonymCorpus, hybrid: Path, tmp_path: Path) -> None:
    """`--encoder` given a hybrid bundle trains with that bundle's encoder, its files as they are (what a click-learning
    round's candidates do: `ssi learn` passes the served bundle); it cannot be fine-tuned (no weights); a round over
    a hybrid served bundle asks for it."""
    from training.feedback.round import RoundSettings, train_command

    train(synonyms, tmp_path / "next", "--epochs", "2", "--dims", "16", "--lr", "0.1", "--encoder", str(hybrid))
    before, after = load_bundle(hybrid), load_bundle(tmp_path / "next")
    assert before.sentence is not None and after.sentence is not None
    assert after.sentence.source == before.sentence.source and after.sentence.weight_rule == LEARNED_RULE
    for name in ("model.onnx", "tokenizer.json"):
        assert (after.sentence_path / name).read_bytes() == (before.sentence_path / name).read_bytes()
    args = ["train", "--corpus", str(synonyms.corpus), "--pairs", str(synonyms.train_pairs), "--encoder", str(hybrid)]
    refused = CliRunner().invoke(build_app(), [*args, "--finetune-encoder", "1", "--out", str(tmp_path / "tuned")])
    assert refused.exit_code == 2 and "holds only its encoder's graph" in refused.output, refused.output
    assert not (tmp_path / "tuned").exists()
    train(synonyms, tmp_path / "plain", "--epochs", "1", "--dims", "16")

    def round_flags(served: Path) -> dict[str, str]:
        settings = RoundSettings(log=Path("events.sqlite"), served=served, corpus=synonyms.corpus)
        command, _ = train_command(settings, Path("clicks.jsonl"), Path("out"))
        return dict(zip(command, command[1:], strict=False))

    assert round_flags(hybrid)["--encoder"] == str(hybrid) and "--encoder" not in round_flags(tmp_path / "plain")


@pytest.mark.skipif(minilm_folder() is None, reason="all-MiniLM-L6-v2 not installed (requirements/minilm.txt)")
def test_all_minilm_from_its_package_is_the_upstream_model_and_exports_exactly(tmp_path: Path) -> None:
    """Slow: exports the real 22M-parameter model (about 15 s) and checks it against PyTorch's forward pass."""
    from ssi.bundle import sha256_file
    from training.pretrained import checked_minilm_folder

    folder = checked_minilm_folder()
    assert {name: sha256_file(folder / name) for name in UPSTREAM_SHA256} == UPSTREAM_SHA256 and len(REVISION) == 40
    # Its int8 graph is measured by benchmarks.hybrid_cost; quantizing it here would add about 5 s of CPU.
    spec = prepare_encoder(folder, tmp_path / "out", name=NAME, threads=2, int8=False)
    assert (spec.dims, spec.pooling, spec.normalize, spec.max_length, spec.license) == (
        384,
        "mean",
        True,
        256,
        "apache-2.0",
    )
    encoder = SentenceEncoder(tmp_path / "out", 2, "fp32")
    texts = ["Vitamin D and multiple sclerosis", "ocean tides follow the moon", "nuclear spin"]
    got = encoder.encode(texts)
    assert cosines(got, reference_vectors(_reference_model(folder), encoder, texts)).min() >= MIN_COSINE
    related, unrelated = float(got[1] @ encoder.encode(["the moon pulls the sea"])[0]), float(got[1] @ got[2])
    assert related > unrelated + 0.2


def test_finetuning_trains_the_encoders_own_weights_then_exports_and_checks_them(
    synonyms: SynonymCorpus, tiny: Path, tmp_path: Path
) -> None:
    """The bundle's encoder is the tuned one: other weights than the folder's (their sha256 in the spec), still
    within MIN_COSINE of their own forward pass (prepare_encoder refuses otherwise), and a query's own document
    further above the other documents than before (the loss's contrast: its cosine less the others' mean).

    Slow: fine-tunes the encoder in PyTorch, then exports the tuned model and checks it."""
    args = ("--epochs", "2", "--dims", "8", "--lr", "0.1", "--encoder", str(tiny), "--finetune-encoder", "2")
    train(synonyms, tmp_path / "b", *args)
    bundle = load_bundle(tmp_path / "b")
    assert bundle.sentence is not None and "fine-tuned on" in bundle.sentence.name
    original = prepare_encoder(tiny, tmp_path / "original")
    assert bundle.sentence.source["model.safetensors"] != original.source["model.safetensors"]
    assert bundle.sentence.source["tokenizer.json"] == original.source["tokenizer.json"]
    docs = {d.id: d.full_text for d in read_corpus(synonyms.corpus)}
    pairs = [tuple(line.split("\t")) for line in synonyms.train_pairs.read_text(encoding="utf-8").splitlines()[:60]]
    queries, targets = [docs[q] for q, _ in pairs], [docs[d] for _, d in pairs]
    before, after = SentenceEncoder(tmp_path / "original"), SentenceEncoder(bundle.sentence_path)
    contrast = []
    for encoder in (before, after):
        cos = encoder.encode(queries) @ encoder.encode(targets).T
        contrast.append(float(np.diag(cos).mean() - cos[~np.eye(len(pairs), dtype=bool)].mean()))
    assert contrast[1] > contrast[0]


def test_a_round_over_the_day_one_hybrid_trains_a_hybrid_candidate(tiny: Path, tmp_path: Path) -> None:
    """The loop's start with an encoder (training.feedback.start) is the day-one hybrid, BM25 + 1 · e(q)·e(d); a
    round of `ssi learn` over it, warm-started, trains its candidate with the served bundle's encoder and learns λ.

    Slow: trains and judges a hybrid candidate and its refit."""
    import typer

    from tests.training.test_learn_round import write_store, write_world
    from training.cli import register
    from training.feedback.start import write_bm25_start

    corpus, relevant = write_world(tmp_path)
    start = tmp_path / "bundles" / "start"
    write_bm25_start(corpus, start, dims=8, encoder=tiny)
    served = load_bundle(start)
    assert served.sentence is not None and served.sentence.weight == DAY_ONE_WEIGHT
    docs, queries = read_corpus(corpus), ["riverish money", "forest storm"]
    encoder = SentenceEncoder(served.sentence_path)
    bm25 = FormScorer(served.vocab, served.form, docs).score(queries)  # U = 0: the lexical part alone
    expected = hybrid_scores(bm25, encoder.encode(queries), encoder.encode([d.full_text for d in docs]), 1.0)
    assert np.allclose(ssi.load(start, corpus=corpus).scores(queries), expected, atol=1e-5)
    store = tmp_path / "events.sqlite"
    write_store(store, relevant)
    app = typer.Typer()
    register(app)
    report = tmp_path / "round.json"
    args = ["learn", "--log", str(store), "--served", str(start), "--corpus", str(corpus), "--name", "cand"]
    args += ["--report", str(report), "--epochs", "50", "--lr", "0.1", "--eta", "0.5", "--split", "time", "--warm"]
    args += ["--threads", "1", "--train-args", "--valid-share 0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["start"].startswith("warm start") and f"--encoder {start}" in data["train_command"]
    candidate = load_bundle(data["candidate"])
    assert candidate.sentence is not None and candidate.sentence.source == served.sentence.source
    assert candidate.sentence.weight_rule == LEARNED_RULE
