"""The `ssi` entry package: `ssi serve` runs the service half alone, without PyTorch or training code.

The service image has no PyTorch, and a serving process that imported the trainer would carry its
memory and start-up cost; so a real `ssi serve` (the venv's console script, a real HTTP server) must
map no libtorch and import no `training`/`torch` module, while `ssi --help` still lists every command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from ssi.bundle import write_bundle
from ssi.forms.lowrank import LowRank
from ssi.vocab import Vocabulary
from ssi_cli.main import CONTRACT_COMMANDS, SERVICE_COMMANDS, TRAINING_COMMANDS, build_app
from tests.service.service_testing import ProcessServer
from training.encoder import build_encoder

REPO = Path(__file__).resolve().parents[2]
SSI = Path(sys.executable).with_name("ssi")
HEAVY = ("training", "torch", "onnx")  # top-level packages a serving process must never import

WORDS = (
    "river bank money loan water fish boat interest rate credit stream flood harbour sail net "
    "market trade ship cargo storm tide coast lake valley forest mountain road bridge city music"
).split()


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without a developer's SSI_* settings, which would override the test's flags."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SSI_")}
    env.update(extra)
    return env


def imported_modules(stderr: str) -> set[str]:
    """Module names from `-X importtime` lines ("import time: self | cumulative | name")."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    } - {"imported package"}


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 40-document corpus and a random low-rank bundle over its words (bundle format 2)."""
    root = tmp_path_factory.mktemp("entry")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=12)) for _ in range(40)]
    corpus = root / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"id": f"doc-{i}", "title": f"Doc {i}", "text": text}) + "\n")
    vocab = Vocabulary.build(texts, min_df=1)
    shape = (8, vocab.size)
    form = LowRank(
        {
            "U": (rng.standard_normal(shape) * 0.2).astype(np.float32),
            "V": (rng.standard_normal(shape) * 0.2).astype(np.float32),
        }
    )
    bundle = root / "bundle"
    write_bundle(bundle, form=form, vocab=vocab, encoder_onnx=build_encoder(form.query_map()))
    return {"root": root, "corpus": corpus, "bundle": bundle}


@pytest.fixture(scope="module")
def served(world: dict[str, Path]) -> Iterator[ProcessServer]:
    """`ssi serve` from the venv's console script, with every import it makes logged (-X importtime)."""
    if not SSI.is_file():
        pytest.fail(f"no `ssi` console script at {SSI}; reinstall the project (scripts/install.sh)")
    args = ["--bundle", str(world["bundle"]), "--corpus", str(world["corpus"])]
    args += ["--cache-dir", str(world["root"] / "cache"), "--log-level", "warning"]
    server = ProcessServer(world["root"], {"PYTHONPROFILEIMPORTTIME": "1"}, args, command=[str(SSI), "serve"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_ssi_serve_process_has_no_torch_and_no_training(served: ProcessServer) -> None:
    """The live server answers a search, maps no libtorch, and never imported a training/torch module."""
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc (Linux) to read the server process's memory maps")
    response = httpx.post(f"{served.url}/search", json={"query": "river bank loan", "k": 5}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["hits"], "the server should rank the generated corpus"

    assert served.process is not None
    maps = Path(f"/proc/{served.process.pid}/maps").read_text(encoding="utf-8", errors="replace")
    mapped = {fields[5] for line in maps.splitlines() if len(fields := line.split(maxsplit=5)) == 6}
    assert any("onnxruntime" in path for path in mapped), "expected the service's onnxruntime to be mapped"
    assert not [path for path in mapped if "torch" in path], "`ssi serve` mapped PyTorch"

    modules = imported_modules(served.log())
    assert "service.server" in modules, "the import log should cover the serving process"
    assert heavy(modules) == [], "`ssi serve` imported training or torch modules"


def test_serve_dispatch_imports_only_the_service_half() -> None:
    """Building `ssi serve` registers the service's commands alone: no training, torch or onnx module."""
    code = (
        "import sys\n"
        "from ssi_cli.main import main\n"
        "try:\n"
        "    main(['serve', '--help'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env(), cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--bundle" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_help_lists_both_halves() -> None:
    """`ssi --help` registers both halves, so a user sees every command."""
    result = subprocess.run(
        [str(SSI), "--help"], capture_output=True, text=True, timeout=120, env=clean_env(COLUMNS="120")
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for command in ("train", "eval", "rank", "serve", "bench", "words"):
        assert f" {command} " in result.stdout, f"`ssi --help` does not list {command}"


def test_dispatch_tables_match_what_each_half_registers() -> None:
    """SERVICE_COMMANDS/TRAINING_COMMANDS route each subcommand to the half that defines it."""
    from service.cli import register as register_service
    from training.cli import register as register_training

    def names(app: typer.Typer) -> set[str]:
        return {info.name for info in [*app.registered_commands, *app.registered_groups] if info.name}

    from ssi_cli.words import register as register_words

    service_app, training_app, contract_app = typer.Typer(), typer.Typer(), typer.Typer()
    register_service(service_app)
    register_training(training_app)
    register_words(contract_app)
    assert names(service_app) == SERVICE_COMMANDS
    assert names(training_app) == TRAINING_COMMANDS
    assert names(contract_app) == CONTRACT_COMMANDS


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"sku": "text"}', "field 'sku' has unknown type 'text' (one of keyword, keyword_list, integer"),
        ('{"9lives": "keyword"}', "field name '9lives' must start with a letter"),
        ('{"sku": "keyword",}', "not valid JSON"),
        ('["sku"]', "a JSON object of field name → type"),
    ],
)
def test_serve_refuses_a_bad_schema_file_naming_the_problem(
    world: dict[str, Path], tmp_path: Path, content: str, message: str
) -> None:
    """`ssi serve --schema FILE` (and SSI_SCHEMA, the same setting): a bad file is one error naming it and the
    problem, exit 2, before anything is started or written."""
    schema = tmp_path / "schema.json"
    schema.write_text(content, encoding="utf-8")
    cache = tmp_path / "cache"
    args = ["serve", "--bundle", str(world["bundle"]), "--cache-dir", str(cache)]
    for given, env in (([*args, "--schema", str(schema)], {}), (args, {"SSI_SCHEMA": str(schema)})):
        result = CliRunner().invoke(build_app("serve"), given, env=env)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and f"schema file {schema}" in result.output
        assert message in result.output and not cache.exists()
