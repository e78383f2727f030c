"""`ssi rank` and `ssi eval` end to end on a small corpus and bundle built in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ssi.bundle import write_bundle
from ssi.forms.lowrank import LowRank
from ssi.forms.psi3 import PSI3
from ssi.records import Pair
from ssi.vocab import Vocabulary
from ssi_cli.main import build_app
from training.encoder import build_encoder
from training.splits import split_by_query

TOPICS = [
    "cat dog pet fur paw tail vet leash",
    "star planet orbit moon comet galaxy",
    "bread flour oven yeast dough bake",
]
N_DOCS = 24


@pytest.fixture()
def workspace(tmp_path: Path) -> dict[str, Path]:
    """A corpus, link pairs, BEIR queries/qrels, a query TSV and a random low-rank bundle."""
    rng = np.random.default_rng(0)
    docs = []
    for i in range(N_DOCS):
        words = rng.choice(TOPICS[i % 3].split(), size=12).tolist() + rng.choice(["the", "a", "of"], size=4).tolist()
        docs.append({"id": f"doc{i}", "title": f"Doc {i}", "text": " ".join(words)})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"doc{i}\tdoc{(i + 3) % N_DOCS}\n" for i in range(N_DOCS)), encoding="utf-8")
    valid = tmp_path / "valid.tsv"
    valid.write_text("".join(f"doc{i}\tdoc{(i + 6) % N_DOCS}\n" for i in range(N_DOCS)), encoding="utf-8")
    queries_jsonl = tmp_path / "queries.jsonl"
    queries_jsonl.write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": TOPICS[i % 3].split()[i % 5]}) + "\n" for i in range(12)),
        encoding="utf-8",
    )
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\tdoc{i}\t1\n" for i in range(12)), encoding="utf-8"
    )
    queries_tsv = tmp_path / "queries.tsv"
    queries_tsv.write_text("a\tcat dog\nb\tplanet orbit the\nempty\tzzz unknown\nc\tbread\n", encoding="utf-8")

    vocab = Vocabulary.build([f"{d['title']}\n{d['text']}" for d in docs], max_words=100, min_df=1)
    U = rng.standard_normal((5, vocab.size)).astype(np.float32)
    V = rng.standard_normal((5, vocab.size)).astype(np.float32)
    bundle = tmp_path / "bundle"
    write_bundle(bundle, form=LowRank({"U": U, "V": V}), vocab=vocab, encoder_onnx=build_encoder(U))
    psi3 = PSI3({"U": U, "V": V, "V3": V[::-1].copy(), "Y3": U[::-1].copy()})
    write_bundle(tmp_path / "psi3", form=psi3, vocab=vocab, encoder_onnx=build_encoder(U))
    return {
        "corpus": corpus, "train": train, "valid": valid, "queries_jsonl": queries_jsonl, "qrels": qrels,
        "queries_tsv": queries_tsv, "bundle": bundle, "psi3": tmp_path / "psi3", "tmp": tmp_path,
    }  # fmt: skip


def run_cli(*args: str | Path):
    return CliRunner().invoke(build_app(), [str(a) for a in args])


def brute_force(ws: dict[str, Path], query: str) -> np.ndarray:
    """f(q, d) = (Uq)·(Vd) + q·d of the low-rank bundle, in float64 from its own files."""
    from ssi.bundle import load_bundle

    bundle = load_bundle(ws["bundle"])
    docs = [json.loads(line) for line in ws["corpus"].read_text().splitlines()]
    D = bundle.vocab.featurize([f"{d['title']}\n{d['text']}" for d in docs]).toarray().astype(np.float64)
    q = bundle.vocab.featurize([query]).toarray().astype(np.float64)[0]
    U, V = (np.asarray(bundle.form.values[k], dtype=np.float64) for k in ("U", "V"))
    return (U @ q) @ (V @ D.T) + q @ D.T


def read_run(path: Path) -> list[list[str]]:
    return [line.split(" ") for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("k", [5, 100])
def test_rank_writes_the_brute_force_order_as_a_trec_run(workspace, k: int) -> None:
    out = workspace["tmp"] / "runs" / "run.trec"
    result = run_cli(
        "rank", "--bundle", workspace["bundle"], "--corpus", workspace["corpus"],
        "--queries", workspace["queries_tsv"], "--k", str(k), "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = read_run(out)
    queries = [line.split("\t") for line in workspace["queries_tsv"].read_text().splitlines()]
    per_query = min(k, N_DOCS)
    assert len(rows) == per_query * len(queries)
    for i, (qid, text) in enumerate(queries):
        block = rows[i * per_query : (i + 1) * per_query]
        assert all(len(r) == 6 and r[0] == qid and r[1] == "Q0" and r[5] == "ssi-lowrank" for r in block)
        assert [int(r[3]) for r in block] == list(range(1, per_query + 1))
        f = brute_force(workspace, text)
        expected = np.lexsort((np.arange(N_DOCS), -np.round(f, 5)))[:per_query]  # ties by corpus position
        assert [r[2] for r in block] == [f"doc{j}" for j in expected]
        np.testing.assert_allclose([float(r[4]) for r in block], f[expected], rtol=1e-5, atol=1e-5)
    # A query with no known word scores every document 0: ranked by corpus position.
    empty = [r[2] for r in rows if r[0] == "empty"]
    assert empty == [f"doc{j}" for j in range(per_query)]


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def rank_args(ws: dict[str, Path], **override: str | Path) -> list[str | Path]:
    args = {"--bundle": ws["bundle"], "--corpus": ws["corpus"], "--queries": ws["queries_tsv"], "--k": "10",
            "--out": ws["tmp"] / "run.trec"}  # fmt: skip
    args.update(override)
    return ["rank", *[x for pair in args.items() for x in pair]]


def test_rank_refuses_a_non_positive_k(workspace) -> None:
    one_line_error(run_cli(*rank_args(workspace, **{"--k": "0"})), "--k must be positive")
    assert not (workspace["tmp"] / "run.trec").exists()


def test_rank_names_the_malformed_corpus_line(workspace) -> None:
    bad = workspace["tmp"] / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": \n', encoding="utf-8")
    one_line_error(run_cli(*rank_args(workspace, **{"--corpus": bad})), f"{bad}:2", "not valid JSON")


def test_rank_names_a_missing_or_malformed_queries_file(workspace) -> None:
    missing = workspace["tmp"] / "nope.tsv"
    one_line_error(run_cli(*rank_args(workspace, **{"--queries": missing})), str(missing), "no such file")
    bad = workspace["tmp"] / "bad.tsv"
    bad.write_text("q1\tfine\nno tab here\n", encoding="utf-8")
    one_line_error(run_cli(*rank_args(workspace, **{"--queries": bad})), f"{bad}:2")
    twice = workspace["tmp"] / "twice.tsv"
    twice.write_text("q1\tcat\nq1\tdog\n", encoding="utf-8")
    one_line_error(run_cli(*rank_args(workspace, **{"--queries": twice})), "'q1' appears twice")


def with_fields(ws: dict[str, Path]) -> Path:
    """The workspace's corpus with fields: `topic` (which of TOPICS) and `n` (the document's number)."""
    corpus = ws["tmp"] / "fields.jsonl"
    lines = ws["corpus"].read_text().splitlines()
    docs = [{**json.loads(line), "fields": {"topic": ["pets", "space", "baking"][i % 3], "n": i}} for i, line in
            enumerate(lines)]  # fmt: skip
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return corpus


def test_rank_ranks_a_filtered_query_among_the_matching_documents_only(workspace) -> None:
    """A JSONL query set's `filter`: that query's run is the brute force over the documents it matches (fewer lines
    when fewer match); a query without one ranks every document; a bad filter is an error naming it."""
    queries = workspace["tmp"] / "filtered.jsonl"
    asked = [
        {"_id": "a", "text": "cat dog", "filter": {"term": {"topic": "space"}}},
        {"_id": "b", "text": "planet bread",
         "filter": {"and": [{"range": {"n": {"gte": 4}}}, {"not": {"terms": {"topic": ["pets"]}}}]}},
        {"_id": "c", "text": "bread"},
        {"_id": "d", "text": "cat", "filter": {"range": {"n": {"lt": 3}}}},
    ]  # fmt: skip
    queries.write_text("".join(json.dumps(q) + "\n" for q in asked), encoding="utf-8")
    corpus = with_fields(workspace)
    out = workspace["tmp"] / "filtered.trec"
    result = run_cli(*rank_args(workspace, **{"--corpus": corpus, "--queries": queries, "--out": out}))
    assert result.exit_code == 0, result.output
    rows = read_run(out)
    matching = {
        "a": [i for i in range(N_DOCS) if i % 3 == 1],
        "b": [i for i in range(N_DOCS) if i >= 4 and i % 3 != 0],
        "c": list(range(N_DOCS)),
        "d": [0, 1, 2],
    }
    for query in asked:
        ranked = [r for r in rows if r[0] == query["_id"]]
        allowed = np.asarray(matching[query["_id"]])
        f = brute_force(workspace, query["text"])[allowed]
        expected = allowed[np.lexsort((allowed, -np.round(f, 5)))][:10]
        assert [r[2] for r in ranked] == [f"doc{j}" for j in expected], query
        assert [int(r[3]) for r in ranked] == list(range(1, len(expected) + 1))
    assert len([r for r in rows if r[0] == "d"]) == 3  # three match: three lines
    unknown = workspace["tmp"] / "unknown.jsonl"
    unknown.write_text(json.dumps({"_id": "x", "text": "cat", "filter": {"term": {"colour": "red"}}}) + "\n")
    one_line_error(run_cli(*rank_args(workspace, **{"--corpus": corpus, "--queries": unknown})), "query 'x'",
                   "unknown field 'colour'")  # fmt: skip
    malformed = workspace["tmp"] / "malformed.jsonl"
    malformed.write_text(json.dumps({"_id": "x", "text": "cat", "filter": {"near": {"n": 1}}}) + "\n")
    one_line_error(run_cli(*rank_args(workspace, **{"--corpus": corpus, "--queries": malformed})),
                   f"{malformed}:1", "unknown filter operator 'near'")  # fmt: skip


def test_rank_refuses_a_corrupt_bundle(workspace) -> None:
    u_file = workspace["bundle"] / "U.npy"
    data = bytearray(u_file.read_bytes())
    data[-3] ^= 0xFF
    u_file.write_bytes(bytes(data))
    one_line_error(run_cli(*rank_args(workspace)), "U.npy", "do not match")
    one_line_error(run_cli(*rank_args(workspace, **{"--bundle": workspace["tmp"]})), "not a bundle")


def test_eval_scores_the_bundle_and_baselines_in_one_table(workspace) -> None:
    out = workspace["tmp"] / "eval"
    result = run_cli(
        "eval", "--bundle", workspace["bundle"], "--bundle", workspace["psi3"], "--corpus", workspace["corpus"],
        "--pairs", workspace["train"], "--eval-pairs", workspace["valid"], "--baselines", "tfidf,bm25,lsi",
        "--lsi-k", "2,4", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    assert list(report["scorers"]) == ["ssi-lowrank", "ssi-psi3", "tfidf", "bm25", "lsi"]
    assert report["scorers"]["ssi-psi3"]["metrics"] != report["scorers"]["ssi-lowrank"]["metrics"]
    assert report["task"]["queries"] == N_DOCS and report["task"]["excluded_per_query"] == 2.0
    assert report["scorers"]["tfidf"]["map_ratio_to_reference"] == pytest.approx(1.0)
    assert report["tuning"]["lsi"]["chosen"]["k"] in (2, 4) and len(report["tuning"]["lsi"]["grid"]) == 2
    for scorer in report["scorers"].values():
        assert set(scorer["metrics"]) == {"map", "p@10", "ndcg@10", "rank_loss"}
        assert scorer["metrics"]["map"]["n"] == N_DOCS
    scorers = report["scorers"]
    assert scorers["bm25"]["paired_difference_to_bm25"] is None
    paired = scorers["ssi-lowrank"]["paired_difference_to_bm25"]  # link task: its primary metric is MAP
    gap = scorers["ssi-lowrank"]["metrics"]["map"]["mean"] - scorers["bm25"]["metrics"]["map"]["mean"]
    assert paired["mean"] == pytest.approx(gap)
    markdown = (out / "results.md").read_text()
    assert "| ssi-psi3 |" in markdown and "MAP / tfidf" in markdown and "Δ MAP vs bm25" in markdown
    assert "ssi" in result.stdout and "tfidf" in result.stdout and "MAP" in result.stdout


def test_eval_keyword_queries_and_beir_validation_split(workspace) -> None:
    out = workspace["tmp"] / "kw"
    result = run_cli(
        "eval", "--corpus", workspace["corpus"], "--pairs", workspace["train"], "--eval-pairs", workspace["valid"],
        "--keywords", "3", "--baselines", "tfidf", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results.json").read_text())["task"]["name"] == "keywords-3"

    out = workspace["tmp"] / "beir"
    result = run_cli(
        "eval", "--corpus", workspace["corpus"], "--queries", workspace["queries_jsonl"], "--qrels",
        workspace["qrels"], "--split", "valid", "--valid-share", "0.25", "--baselines", "tfidf,bm25", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    pairs = [Pair(f"q{i}", f"doc{i}") for i in range(12)]
    assert report["task"]["queries"] == len(split_by_query(pairs, 0.25, 0)[1]) == 3
    assert report["task"]["primary_metric"] == "ndcg@10"


def test_eval_scores_a_filtered_query_among_the_matching_documents(workspace) -> None:
    """A query set line's `filter`: each query below matches its one relevant document alone, so every scorer ranks
    it first (MAP 1, which no scorer reaches over the whole corpus); a judged document outside its query's filter
    is dropped and counted; the report names the filtered queries."""
    queries = workspace["tmp"] / "filtered.jsonl"
    lines = [{"_id": f"q{i}", "text": TOPICS[i % 3].split()[0], "filter": {"term": {"n": i}}} for i in range(6)]
    lines.append({"_id": "q6", "text": "cat", "filter": {"term": {"topic": "space"}}})  # doc6 is pets: outside
    queries.write_text("".join(json.dumps(q) + "\n" for q in lines), encoding="utf-8")
    out = workspace["tmp"] / "filtered-eval"
    args = ["eval", "--bundle", workspace["bundle"], "--corpus", with_fields(workspace), "--qrels", workspace["qrels"],
            "--baselines", "tfidf", "--no-tune"]  # fmt: skip
    result = run_cli(*args, "--queries", queries, "--out", out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    assert report["task"]["queries"] == 6 and report["task"]["filtered_queries"] == 6
    assert report["task"]["stats"]["outside_filter"] == 1
    assert "1 evaluation pairs name a document outside their query's filter (dropped)" in result.stderr
    for name, scorer in report["scorers"].items():
        assert scorer["metrics"]["map"]["n"] == 6 and scorer["metrics"]["map"]["mean"] == pytest.approx(1.0), name
    plain = workspace["tmp"] / "plain.jsonl"  # the same queries without their filters: not all first
    plain.write_text("".join(json.dumps({"_id": q["_id"], "text": q["text"]}) + "\n" for q in lines[:6]))
    result = run_cli(*args, "--queries", plain, "--out", workspace["tmp"] / "plain-eval")
    assert result.exit_code == 0, result.output
    report = json.loads((workspace["tmp"] / "plain-eval" / "results.json").read_text())
    assert all(scorer["metrics"]["map"]["mean"] < 1.0 for scorer in report["scorers"].values())


def test_eval_names_the_malformed_pairs_line(workspace) -> None:
    bad = workspace["tmp"] / "bad_pairs.tsv"
    bad.write_text("doc1\tdoc2\njust-one-column\n", encoding="utf-8")
    result = run_cli(
        "eval", "--corpus", workspace["corpus"], "--eval-pairs", bad, "--baselines", "tfidf",
        "--out", workspace["tmp"] / "e",
    )  # fmt: skip
    one_line_error(result, f"{bad}:2")


def test_eval_refuses_options_that_make_no_single_task(workspace) -> None:
    common = ["--corpus", workspace["corpus"], "--out", workspace["tmp"] / "e"]
    one_line_error(run_cli("eval", *common), "give either --eval-pairs")
    one_line_error(
        run_cli("eval", *common, "--eval-pairs", workspace["valid"], "--qrels", workspace["qrels"]), "give either"
    )
    one_line_error(run_cli("eval", *common, "--eval-pairs", workspace["valid"], "--baselines", "bm99"), "bm99")
    one_line_error(
        run_cli("eval", *common, "--eval-pairs", workspace["valid"], "--bundle", workspace["tmp"] / "none"),
        "not a bundle",
    )
