"""Keeps what cannot run here honest: the Dockerfiles, the compose file, the scripts, the README's
commands and CI. Docker cannot build on these machines, so every file, script, command, flag and
route that they name is checked against the real repository, the real CLI and the real app."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "docker").glob("*.Dockerfile"))
COMPOSE = REPO / "docker-compose.yml"
SSI = Path(sys.executable).with_name("ssi")


# -- parsing helpers -----------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, f"{path}: dangling line continuation"
    return instructions


def argv_of(arguments: str) -> list[str]:
    """A Dockerfile CMD/ENTRYPOINT/HEALTHCHECK CMD in exec form (JSON) or shell form."""
    return json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)


def the(instructions: list[tuple[str, str]], keyword: str) -> str:
    found = [args for kw, args in instructions if kw == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {len(found)}"
    return found[0]


def repo_path(path_in_image: str) -> Path:
    """/app/scripts/x (the image's WORKDIR) or scripts/x -> the file in this repository."""
    return REPO / path_in_image.removeprefix("/app/")


def ssi_cli() -> Any:
    """The `ssi` command tree as typer builds it (a group of subcommands)."""
    from ssi_cli.main import build_app

    command = typer.main.get_command(build_app())
    assert hasattr(command, "commands"), "`ssi` should be a group of subcommands"
    return command


def options_of(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("-")}


def check_ssi_argv(argv: list[str], entry_point: bool = False) -> None:
    """`ssi SUB --flag value ...`: SUB is a real subcommand, every flag one of its options, and `--help` runs:
    through the installed `ssi` script in a new process with `entry_point` (what an image's CMD runs), else through
    the same `main` in this process, once a subcommand (a new interpreter importing the training half, torch
    included, cost ~10 s of a loaded two-core machine a call; the learner's test runs `ssi learn` as a process)."""
    assert argv[0] == "ssi", argv
    group = ssi_cli()
    assert argv[1] in group.commands, f"`ssi {argv[1]}` is not a command (have: {sorted(group.commands)})"
    command, rest = group.commands[argv[1]], argv[2:]
    if hasattr(command, "commands") and rest and rest[0] in command.commands:  # a group: `ssi clicks links ...`
        command, rest = command.commands[rest[0]], rest[1:]
    known = options_of(command)
    for arg in rest:
        if arg.startswith("--"):
            assert arg.split("=", 1)[0] in known, f"`ssi {argv[1]}` has no option {arg}"
    if entry_point:
        subprocess.run([str(SSI), argv[1], "--help"], check=True, capture_output=True, timeout=120)
    else:
        ssi_help(argv[1])


@functools.cache
def ssi_help(subcommand: str) -> str:
    """`ssi SUBCOMMAND --help` as the `ssi` script runs it (ssi_cli.main.main), in this process: its output."""
    from typer.testing import CliRunner

    from ssi_cli.main import build_app

    result = CliRunner().invoke(build_app(subcommand), [subcommand, "--help"], prog_name="ssi")
    assert result.exit_code == 0, result.output[-2000:]
    assert "Usage" in result.output, result.output[-2000:]
    return result.output


def script_options(script: Path) -> set[str]:
    """The `--flag)` labels of a script's argument `case`."""
    return set(re.findall(r"^\s*(--[a-z][a-z-]*)(?:\|[^)]*)?\)", script.read_text(encoding="utf-8"), flags=re.M))


def check_script_argv(argv: list[str]) -> None:
    """`bash /app/scripts/x.sh --flag ...`: the script exists, takes these flags, and `--help` runs."""
    if argv[0] == "bash":
        argv = argv[1:]
    script = repo_path(argv[0])
    assert script.is_file(), f"{argv[0]} does not exist in the repository"
    known = script_options(script)
    for arg in argv[1:]:
        if arg.startswith("--"):
            assert arg in known, f"{script.name} takes no option {arg} (has {sorted(known)})"
    subprocess.run(["bash", str(script), "--help"], check=True, capture_output=True, timeout=60)


class Routes:
    """Asks the real app's router whether it answers a method and path (no server, nothing loaded)."""

    def __init__(self, app: object) -> None:
        self.app = app

    def answers(self, path: str, method: str = "GET") -> bool:
        from starlette.routing import Match

        scope = {"type": "http", "path": path, "method": method, "root_path": "", "headers": [], "query_string": b""}
        return any(route.matches(scope)[0] == Match.FULL for route in self.app.router.routes)


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> Routes:
    from service.app import create_app
    from service.settings import Settings

    tmp = tmp_path_factory.mktemp("app")
    return Routes(create_app(Settings(bundle=tmp / "bundle", cache_dir=tmp / "cache")))


def test_route_check_can_say_no(routes: Routes) -> None:
    assert routes.answers("/readyz") and routes.answers("/search", "POST")
    assert not routes.answers("/no-such-route") and not routes.answers("/search", "GET")


def test_search_page_and_its_assets_are_served(routes: Routes) -> None:
    assert routes.answers("/")
    page = (REPO / "service" / "static" / "index.html").read_text(encoding="utf-8")
    for asset in re.findall(r'(?:href|src)="(static/[^"]+)"', page):
        assert (REPO / "service" / asset).is_file(), asset
        assert routes.answers("/" + asset)
    # The API calls the page makes exist.
    script = (REPO / "service" / "static" / "app.js").read_text(encoding="utf-8")
    assert 'search: "search"' in script and routes.answers("/search", "POST")
    assert routes.answers("/documents/some-id") and routes.answers("/documents/some-id/similar")
    assert routes.answers("/model")
    fields = (REPO / "service" / "static" / "fields.js").read_text(encoding="utf-8")
    assert 'SCHEMA_URL = "openapi.json"' in fields and routes.answers("/openapi.json")


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


# -- Dockerfiles ---------------------------------------------------------------------------------


def test_there_are_two_images() -> None:
    assert {p.name for p in DOCKERFILES} == {"service.Dockerfile", "trainer.Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_names_only_files_that_exist(dockerfile: Path) -> None:
    instructions = dockerfile_instructions(dockerfile)
    assert instructions[0] == ("FROM", "python:3.11-slim")
    ignore = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    for keyword, args in instructions:
        if keyword == "COPY":
            *sources, _dest = shlex.split(args)
            for source in sources:
                assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source}: no such file"
                # .dockerignore excludes everything but what it re-includes.
                assert f"!{source}" in ignore, f"{source} is excluded from the build context by .dockerignore"
        for script in re.findall(r"(?:/app/)?scripts/[\w./-]+", args):
            assert repo_path(script).is_file(), f"{dockerfile.name}: {keyword} names {script}, which does not exist"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_installs_with_the_scripts_ci_runs(dockerfile: Path) -> None:
    runs = " ".join(args for kw, args in dockerfile_instructions(dockerfile) if kw == "RUN")
    assert "scripts/install.sh" in runs, "the image must install with the same script as CI and the quick start"
    # A non-root user for the process.
    instructions = dockerfile_instructions(dockerfile)
    assert the(instructions, "USER") not in ("root", "0")


def test_service_image_has_no_torch_and_a_readiness_healthcheck(routes: Routes) -> None:
    instructions = dockerfile_instructions(REPO / "docker" / "service.Dockerfile")
    runs = " ".join(args for kw, args in instructions if kw == "RUN")
    extras = re.search(r"install\.sh .*--extras (\S+)", runs)
    # The serving extras, and `encoder` (onnxruntime and tokenizers: a hybrid bundle's sentence encoder), no more.
    assert extras and extras.group(1) == "serve,encoder", "the service image installs the serving extras only"
    assert "torch" not in extras.group(1) and "train" not in extras.group(1)

    health = the(instructions, "HEALTHCHECK")
    argv = argv_of(health.split("CMD", 1)[1].strip())
    assert repo_path(argv[1]).is_file()
    assert argv[2] == "/readyz" and routes.answers("/readyz")

    check_ssi_argv(argv_of(the(instructions, "CMD")), entry_point=True)


def test_trainer_image_runs_the_train_script_with_pinned_cpu_torch() -> None:
    instructions = dockerfile_instructions(REPO / "docker" / "trainer.Dockerfile")
    runs = " ".join(args for kw, args in instructions if kw == "RUN")
    assert re.search(r"install\.sh .*--extras train\b", runs)
    assert '"${install[@]}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==$torch_version"' in (
        REPO / "scripts" / "install.sh"
    ).read_text(encoding="utf-8")
    assert 'torch_version="2.13.0"' in (REPO / "scripts" / "install.sh").read_text(encoding="utf-8")
    check_script_argv(argv_of(the(instructions, "CMD")))


def test_ssi_serve_runs_without_torch() -> None:
    """What the service image has: the `ssi` entry point must not import torch or onnx to serve."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['onnx'] = None\n"
        "from ssi_cli.main import main\n"
        "sys.argv = ['ssi', 'serve', '--help']\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--bundle" in result.stdout


# -- docker-compose.yml --------------------------------------------------------------------------


def test_compose_builds_both_images_from_files_that_exist() -> None:
    services = compose()["services"]
    assert set(services) == {"trainer", "service", "learner"}
    dockerfiles = {name: spec["build"]["dockerfile"] for name, spec in services.items()}
    assert dockerfiles == {
        "trainer": "docker/trainer.Dockerfile",
        "service": "docker/service.Dockerfile",
        "learner": "docker/trainer.Dockerfile",  # the learner trains: the trainer's image, built once
    }
    assert services["learner"]["image"] == services["trainer"]["image"]
    for spec in services.values():
        assert spec["build"]["context"] == "."
        assert (REPO / spec["build"]["dockerfile"]).is_file()


def test_compose_commands_are_real_commands() -> None:
    services = compose()["services"]
    check_script_argv(services["trainer"]["command"])
    check_ssi_argv(services["service"]["command"])
    check_ssi_argv(services["learner"]["command"])


def compose_defaults(value: str) -> str:
    """A compose value with each ${VAR:-default} replaced by its default (an empty environment)."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", lambda m: m.group(1), value)


def option(argv: list[str], flag: str) -> str:
    return compose_defaults(argv[argv.index(flag) + 1])


def test_compose_learner_learns_from_the_services_log_and_reloads_it() -> None:
    """The learner reads the service's own traffic log, writes its bundles where the service may reload from, and
    reloads the service in the compose network with the admin key both read from the environment."""
    from service.settings import DEFAULT_COLLECTION, Settings
    from ssi.traffic import EVENTS_FILE
    from training.feedback.learner import DEFAULT_MIN_NEW_SESSIONS
    from training.feedback.schedule import parse_duration

    spec = compose()
    service, learner = spec["services"]["service"], spec["services"]["learner"]
    argv = learner["command"]
    assert argv[:2] == ["ssi", "learn"] and "learn" in learner["profiles"]  # started on demand: it reloads models
    assert learner["depends_on"]["service"]["condition"] == "service_healthy"
    assert learner["restart"] in ("unless-stopped", "always", "on-failure")
    learner_mounts = {v.split(":")[1]: v.split(":")[0] for v in learner["volumes"]}
    service_mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
    assert all(not v.endswith(":ro") for v in learner["volumes"])  # it writes bundles, and SQLite's WAL index
    # --log: the service's event store of its default collection, in the same volume.
    store = service["environment"]["SSI_DATA_DIR"]
    assert option(argv, "--log") == f"{store}/stores/{DEFAULT_COLLECTION}/{EVENTS_FILE}"
    assert learner_mounts[store] == service_mounts[store]
    # --served and --corpus: what the service serves; --bundles under the folder it may reload from (the served
    # bundle's parent: no SSI_BUNDLE_ROOT), in the same volume, which the learner may write.
    served_argv = service["command"]
    assert option(argv, "--served") == option(served_argv, "--bundle")
    assert option(argv, "--corpus") == option(served_argv, "--corpus")
    assert "SSI_BUNDLE_ROOT" not in service["environment"]
    root = str(Path(option(argv, "--served")).parent)
    assert Path(option(argv, "--bundles")).is_relative_to(root)
    assert learner_mounts[root] == service_mounts[root]
    # --server: the service by its compose name and port; the admin key both read.
    assert option(argv, "--server") == f"http://service:{compose_defaults(service['environment']['SSI_PORT'])}"
    assert learner["environment"]["SSI_ADMIN_KEY"] == service["environment"]["SSI_ADMIN_KEY"] == "${SSI_ADMIN_KEY:-}"
    assert "admin_key" in Settings.model_fields
    # the defaults parse as `ssi learn` reads them
    assert parse_duration(option(argv, "--every")) >= 60
    assert int(option(argv, "--min-new-sessions")) == DEFAULT_MIN_NEW_SESSIONS


def test_compose_learner_command_starts_learns_and_stops(tmp_path: Path) -> None:
    """The learner's command as compose runs it (the environment's defaults, its volumes as folders here) on a
    log with fewer new sessions than a round asks: it records the skip in the history, waits for the next round,
    and stops on SIGTERM, what `docker stop` sends, with status 0."""
    from tests.service.service_testing import ThreadServer
    from tests.training.test_learn_round import write_store, write_world
    from training.feedback.history import read_history
    from training.feedback.start import write_bm25_start

    learner = compose()["services"]["learner"]
    volumes = {target: tmp_path / name for name, target, *_ in (v.split(":") for v in learner["volumes"])}

    def here(arg: str) -> str:
        value = compose_defaults(arg)
        for target, folder in volumes.items():
            if value == target or value.startswith(target + "/"):
                return str(folder) + value[len(target) :]
        return value

    argv = [here(arg) for arg in learner["command"]]
    corpus, relevant = write_world(tmp_path)
    Path(option(argv, "--corpus")).parent.mkdir(parents=True)
    os.replace(corpus, option(argv, "--corpus"))
    write_bm25_start(Path(option(argv, "--corpus")), Path(option(argv, "--served")), dims=8)
    Path(option(argv, "--log")).parent.mkdir(parents=True)
    write_store(Path(option(argv, "--log")), relevant)  # 240 impressions: fewer than a round asks
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSI_")}
    env.update({k: compose_defaults(v) for k, v in learner["environment"].items()})
    env["SSI_ADMIN_KEY"] = "compose-learner-admin-key"  # the compose file's is the operator's (empty by default)
    history = Path(option(argv, "--bundles")) / "learn-history.jsonl"
    # the service it talks to (a round first asks it whether a comparison runs): a real one, at its address here
    served = Path(option(argv, "--served"))
    with ThreadServer(
        bundle=served, corpus=Path(option(argv, "--corpus")), cache_dir=tmp_path / "cache",
        admin_key=env["SSI_ADMIN_KEY"], bundle_root=served.parent,
    ) as server:  # fmt: skip
        argv[argv.index("--server") + 1] = server.url
        output, returncode = _run_learner(argv, env, history)
    assert returncode == 0, output
    assert "skipped" in output and "stopped after 1 round" in output
    [record] = read_history(history)
    assert record.decision == "skipped" and record.sessions == 240 and "--min-new-sessions" in (record.reason or "")


def _run_learner(argv: list[str], env: dict[str, str], history: Path) -> tuple[str, int | None]:
    """Run the learner until its first round is recorded, then stop it with SIGTERM: its output and status."""
    process = subprocess.Popen(
        [str(SSI), *argv[1:]], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not history.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert history.exists(), process.communicate(timeout=30)[0] if process.poll() is not None else "no history"
        time.sleep(0.5)  # into the wait for the next round
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return output, process.returncode


def test_compose_runs_the_trainer_once_then_the_service_from_its_volume() -> None:
    spec = compose()
    trainer, service = spec["services"]["trainer"], spec["services"]["service"]
    assert service["depends_on"]["trainer"]["condition"] == "service_completed_successfully"
    assert trainer["restart"] == "no"
    assert service["restart"] in ("unless-stopped", "always", "on-failure")
    declared = set(spec["volumes"])
    trainer_mounts = {v.split(":")[0]: v.split(":")[1] for v in trainer["volumes"]}
    service_mounts = {v.split(":")[0]: v.split(":")[1] for v in service["volumes"]}
    data_volume = next(name for name, target in trainer_mounts.items() if target == "/data")
    assert data_volume in declared, "the bundle must go to a named volume"
    assert service_mounts[data_volume] == "/data"
    # The paths the trainer writes are the ones the service reads.
    argv = service["command"]
    assert argv[argv.index("--bundle") + 1] == "/data/bundle"
    assert argv[argv.index("--corpus") + 1] == "/data/corpus.jsonl"
    assert trainer["command"][trainer["command"].index("--data") + 1] == "/data"
    # The default input folder exists (the trainer falls back to the demo corpus when it is empty).
    default_input = re.search(r":-([^}]+)\}", next(v for v in trainer["volumes"] if "/input" in v)).group(1)
    assert (REPO / default_input).is_dir()


def test_compose_settings_come_from_the_environment() -> None:
    service = compose()["services"]["service"]
    env = service["environment"]
    for name in ("SSI_API_KEY", "SSI_PORT", "SSI_INDEX_TYPE", "SSI_THREADS"):
        assert name in env and f"${{{name}" in str(env[name]), f"{name} should be taken from the environment"
    # Each of them is a real setting of the service.
    from service.settings import Settings

    for name in env:
        if name.startswith("SSI_"):
            assert name.removeprefix("SSI_").lower() in Settings.model_fields, f"{name} is not a service setting"
    assert any("${SSI_PORT" in port for port in service["ports"])
    # The trainer's SSI_TRAIN_* variables are real settings of `ssi train`.
    from training.settings import TrainSettings

    trainer_env = compose()["services"]["trainer"]["environment"]
    assert "SSI_TRAIN_THREADS" in trainer_env
    for name in trainer_env:
        if name.startswith("SSI_TRAIN_"):
            assert name.removeprefix("SSI_TRAIN_").lower() in TrainSettings.model_fields, f"{name} is not a setting"
    # The learner's SSI_* variables are `ssi learn`'s own (its options' environment variables).
    learn = ssi_cli().commands["learn"]
    learn_variables = {param.envvar for param in learn.params if param.envvar}
    for name in compose()["services"]["learner"]["environment"]:
        if name.startswith("SSI_"):
            assert name in learn_variables, f"{name} is not read by `ssi learn`"
    for spec in compose()["services"].values():
        limits = spec["deploy"]["resources"]["limits"]
        assert limits["cpus"] and limits["memory"]


def test_compose_healthcheck_calls_a_real_route(routes: Routes) -> None:
    argv = compose()["services"]["service"]["healthcheck"]["test"]
    assert argv[0] == "CMD"
    assert repo_path(argv[2]).is_file()
    assert argv[3] == "/readyz" and routes.answers(argv[3])


class _Stub(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        self.send_response(200 if self.path == "/readyz" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub_server() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_healthcheck_script_tells_ready_from_not_ready(stub_server: int) -> None:
    script = REPO / "scripts" / "healthcheck.py"

    def run(route: str, port: int) -> int:
        env = {**os.environ, "SSI_PORT": str(port)}
        return subprocess.run([sys.executable, str(script), route], env=env, capture_output=True, timeout=30).returncode

    assert run("/readyz", stub_server) == 0
    assert run("/elsewhere", stub_server) == 1  # a 503 is unhealthy
    with __import__("socket").socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    assert run("/readyz", free) == 1


# -- scripts, README, CI -------------------------------------------------------------------------

SCRIPTS = sorted((REPO / "scripts").glob("*.sh")) + [REPO / ".ci" / "run"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_are_strict_and_parse(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    assert os.access(script, os.X_OK), f"{script} should be executable"


def _ssi_invocations(text: str) -> list[list[str]]:
    """`ssi SUB` calls in a shell script as ["ssi", SUB, every --flag on the line, even inside ${x:+--flag}]."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        if line.lstrip().startswith("#") or "echo" in line:
            continue
        # `ssi SUB [SUBSUB] ...`: a second word names a command of a group (`ssi clicks links`)
        match = re.search(r"(?:^|[\s(])ssi\s+([a-z][a-z-]*)((?:\s+[a-z][a-z-]*)?)(.*)$", line)
        if match:
            flags = re.findall(r"(?<![\w-])--[a-z][a-z-]*", match.group(3))
            found.append(["ssi", match.group(1), *match.group(2).split(), *flags])
    return found


def test_scripts_call_real_ssi_commands_and_flags() -> None:
    """Every `ssi` call in the shipped scripts parses with the real command line, and its subcommand's help runs.

    Slow: building the whole command line imports the trainer's and the service's modules (torch included)."""
    calls = [call for script in SCRIPTS for call in _ssi_invocations(script.read_text(encoding="utf-8"))]
    assert {call[1] for call in calls} >= {"train", "serve"}
    assert any("--valid-pairs" in call for call in calls)
    for call in calls:
        check_ssi_argv(call)


def readme_quick_start() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^#+\s+Quick start\s*$(.*?)(?=^#+\s)", text, flags=re.M | re.S)
    assert section, "README.md needs a 'Quick start' heading"
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), flags=re.M | re.S)
    assert block, "the Quick start section needs a fenced code block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_quick_start_is_two_commands_that_exist() -> None:
    install_and_run, run_tests = readme_quick_start()  # exactly two
    assert shlex.split(install_and_run)[-1] == "scripts/quickstart.sh"
    assert shlex.split(run_tests)[-1] == "scripts/test.sh"
    for command in (install_and_run, run_tests):
        assert (REPO / shlex.split(command)[-1]).is_file()


def test_ci_runs_the_readmes_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    program = re.search(r"test_command=\"\$\(awk '(.*?)' README\.md\)\"", ci, flags=re.S)
    assert program, ".ci/run should read the test command from README.md"
    extracted = subprocess.run(
        ["awk", program.group(1), str(REPO / "README.md")], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    assert extracted == readme_quick_start()[1]
    assert 'bash -c "$test_command"' in ci
    assert "apt-get update" in ci and "chromium chromium-driver" in ci
    assert "scripts/install.sh" in ci


def test_test_command_fails_when_no_test_runs() -> None:
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "test.sh"), "tests/ship/test_ship_files.py", "-k", "no_test_has_this_name"],
        # in one process without coverage: the exit status 5 it turns into a failure is pytest's, with or without
        # xdist's workers (which, started for nothing, cost ~40 s of a loaded two-core machine)
        env={
            **os.environ,
            "LINT": "0",
            "DOCS": "0",
            "WORKERS": "0",
            "COVERAGE": "0",
            "VENV": str(Path(sys.executable).parents[1]),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "collected no tests" in result.stderr


# -- python -m ... --help ------------------------------------------------------------------------


@pytest.mark.parametrize("package", ["service", "training"])
def test_python_m_help_explains_every_option(package: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", package, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Usage" in result.stdout
    module = __import__(f"{package}.__main__", fromlist=["app"])
    command = typer.main.get_command(module.app)
    commands = command.commands.values() if hasattr(command, "commands") else [command]
    for sub in commands:
        for param in sub.params:
            if param.param_type_name == "option" and param.name != "help":
                assert (param.help or "").strip(), f"python -m {package}: option {param.opts[0]} has no help text"


# -- scripts/train-bundle.sh (the quick start's and the trainer image's training step) -------------


def _train_bundle(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSI_")}
    env["PATH"] = f"{SSI.parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "train-bundle.sh"), *args, "--", "--no-progress", "--dims", "8"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_train_bundle_trains_once_per_input_and_refuses_missing_files(tmp_path: Path) -> None:
    """The script trains a real bundle; a second call with the same inputs trains nothing; a changed input trains
    again; a missing corpus is refused.

    Slow: trains a bundle on a demo corpus through the script twice (each a new interpreter importing torch)."""
    from ssi.bundle import load_bundle
    from training.demo_corpus import DemoConfig, generate, write

    source = tmp_path / "input"
    write(generate(DemoConfig(topics=2, seed=3)), source)
    data = tmp_path / "data"

    first = _train_bundle("--data", str(data), "--input", str(source), "--minutes", "0.01")
    assert first.returncode == 0, first.stderr[-3000:]
    bundle = load_bundle(data / "bundle")
    assert bundle.manifest.n_dims == 8
    assert (data / "corpus.jsonl").read_bytes() == (source / "corpus.jsonl").read_bytes()

    again = _train_bundle("--data", str(data), "--input", str(source), "--minutes", "0.01")
    assert again.returncode == 0 and "up to date" in again.stdout
    assert load_bundle(data / "bundle").content_hash == bundle.content_hash

    with (source / "train_pairs.tsv").open("a", encoding="utf-8") as handle:
        handle.write("astronomy-001\tastronomy-002\n")
    changed = _train_bundle("--data", str(data), "--input", str(source), "--minutes", "0.01")
    assert changed.returncode == 0 and "up to date" not in changed.stdout, changed.stderr[-3000:]
    assert load_bundle(data / "bundle").content_hash != bundle.content_hash  # trained again, on the new pairs

    (source / "corpus.jsonl").unlink()
    missing = _train_bundle("--data", str(data), "--input", str(source))
    assert missing.returncode != 0 and "no corpus.jsonl" in missing.stderr
