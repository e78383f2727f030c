"""Fuzz the whole HTTP API with schemathesis: every operation of the OpenAPI schema, every check.

A real server (`python -m service serve`, with a write key) serves a small generated collection
(benchmarks.api_world); schemathesis runs its phases (coverage, fuzzing, stateful) with
`--checks all` twice per round, once sending the key and once without, with a new seed each round
until `--requests` requests have been sent. The report counts requests by status, responses ≥ 500,
check failures by check (a schema violation is a failure of response_schema_conformance,
status_code_conformance, content_type_conformance and the like), 4xx answers that are not a JSON
error with a message, and tracebacks in the server log. Exit status 1 if any of these is not zero.

    python -m benchmarks.fuzz_api --requests 10000 --out fuzz-report
    scripts/fuzz-api.sh --requests 10000            # the same

`--config schemathesis.toml` gives every run schemathesis settings by operation (tests/service/test_http_fuzz.py
says there where the coverage phase runs).

Every generated case is sent as schemathesis makes it: a write that names an id twice is valid to the
schema, and the server answers it with the 409 the schema declares.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from benchmarks.api_world import REPO, Server, write_world

KEY = "fuzz-key-0123456789abcdef"
MODES = ("keyed", "unkeyed")


@dataclass
class Tally:
    """What the runs saw, summed over rounds and modes."""

    requests: Counter[str] = field(default_factory=Counter)  # by mode
    statuses: Counter[int] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)  # by check name
    examples: list[dict[str, Any]] = field(default_factory=list)  # a few failing requests, to reproduce
    bad_4xx: int = 0  # 4xx answers without a JSON {"detail": "<message>"}
    tool_errors: list[str] = field(default_factory=list)  # schemathesis's own errors (a phase did not finish)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def ok(self) -> bool:
        return not self.failures and not self.server_errors and not self.bad_4xx and not self.tool_errors


def _decode(content: dict[str, Any] | None) -> bytes:
    if not content:
        return b""
    if "$base64" in content:
        return base64.b64decode(content["$base64"])
    return str(content.get("string", "")).encode()


def _is_json_error(response: dict[str, Any]) -> bool:
    types = response.get("headers", {}).get("content-type", [""])
    if not any("application/json" in t for t in types):
        return False
    try:
        detail = json.loads(_decode(response.get("content"))).get("detail")
    except (ValueError, AttributeError):
        return False
    return isinstance(detail, str) and bool(detail.strip())


def read_report(path: Path, mode: str, tally: Tally) -> int:
    """Add one schemathesis NDJSON report to `tally`; returns the requests it holds."""
    requests = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        finished = event.get("ScenarioFinished")
        if not finished:
            continue
        recorder = finished.get("recorder", {})
        for interaction in recorder.get("interactions", {}).values():
            response = interaction.get("response")
            requests += 1
            if response is None:
                continue
            status = int(response["status_code"])
            tally.statuses[status] += 1
            if 400 <= status < 500 and not _is_json_error(response):
                tally.bad_4xx += 1
                if len(tally.examples) < 20:
                    tally.examples.append({"mode": mode, "check": "4xx not a JSON error", **interaction["request"]})
        for case_id, checks in recorder.get("checks", {}).items():
            for check in checks:
                if check.get("status") == "failure":
                    tally.failures[check["name"]] += 1
                    request = recorder.get("interactions", {}).get(case_id, {}).get("request", {})
                    if len(tally.examples) < 20:
                        tally.examples.append({"mode": mode, "check": check["name"], **request})
    tally.requests[mode] += requests
    return requests


def tool_errors(output: str) -> list[str]:
    """The lines of the "Errors:" block of schemathesis's summary (errors of the tool, not of the API)."""
    block = re.search(r"^Errors:\n((?:[ \t]+\S.*\n)+)", output, flags=re.M)
    return [line.strip() for line in block.group(1).splitlines()] if block else []


# schemathesis gives up loading the schema after 10 s, and on a loaded 2-core machine the served /openapi.json (already
# built) once took longer (clean-clone run c14): such a round is run again, at most this many times in all.
SCHEMA_ATTEMPTS = 3
SCHEMA_NOT_LOADED = "Failed to load specification"


def run_schemathesis(
    url: str,
    mode: str,
    seed: int,
    examples: int,
    workers: int,
    report_dir: Path,
    extra: list[str],
    config: Path | None = None,
) -> tuple[list[str], int, float]:
    """One `schemathesis run` over the whole schema; returns its command, exit status and seconds.
    `config`: a schemathesis.toml (its --config-file)."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        *(["--config-file", str(config)] if config is not None else []),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        str(examples),
        "--seed",
        str(seed),
        "--workers",
        str(workers),
        "--continue-on-failure",
        "--no-color",
        "--report",
        "ndjson",
        "--report-dir",
        str(report_dir),
        *extra,
    ]
    if mode == "keyed":
        command += ["--header", f"X-API-Key: {KEY}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    with (report_dir / "output.txt").open("w", encoding="utf-8") as output:
        # In the report folder: schemathesis keeps its cache (.schemathesis/) in the working directory.
        status = subprocess.run(command, env=env, cwd=report_dir, stdout=output, stderr=subprocess.STDOUT).returncode
    return command, status, time.perf_counter() - started


def fuzz(
    requests: int,
    examples: int,
    seed: int,
    workers: int,
    out: Path,
    extra: list[str] | None = None,
    repo: Path = REPO,
    extra_by_mode: dict[str, list[str]] | None = None,
    config: Path | None = None,
) -> dict[str, Any]:
    """Fuzz until `requests` requests were sent (both modes each round); the summary, also in out/summary.json.
    `extra`: schemathesis arguments for both modes; `extra_by_mode`: more for one mode (e.g. its `--phases`);
    `config`: a schemathesis.toml for every run (settings by operation, e.g. where a phase runs)."""
    out.mkdir(parents=True, exist_ok=True)
    world = write_world(out / "world", n_docs=300, seed=seed, fields=True)  # filters, facets and fields fuzzed too
    tally = Tally()
    with Server(world, {"SSI_API_KEY": KEY}, repo) as server:
        # The server builds its OpenAPI document at the first request for it, which took over 10 s on a loaded
        # 2-core machine, and schemathesis gives up loading a schema after 10 s: built here first, unhurried.
        httpx.get(f"{server.url}/openapi.json", timeout=300.0).raise_for_status()
        round_ = 0
        while sum(tally.requests.values()) < requests:
            for mode in MODES:
                report_dir = out / f"round-{round_:03d}-{mode}"
                report_dir.mkdir(parents=True, exist_ok=True)
                arguments = [*(extra or []), *(extra_by_mode or {}).get(mode, [])]
                for _attempt in range(SCHEMA_ATTEMPTS):
                    command, status, seconds = run_schemathesis(
                        server.url, mode, seed + round_, examples, workers, report_dir, arguments, config
                    )
                    sent = sum(read_report(report, mode, tally) for report in report_dir.glob("*.ndjson"))
                    output = (report_dir / "output.txt").read_text(encoding="utf-8", errors="replace")
                    if sent or SCHEMA_NOT_LOADED not in output:
                        break
                    print(f"round {round_} {mode}: schemathesis could not load the schema in time; again", flush=True)
                errors = tool_errors(output)
                tally.tool_errors += [f"{mode} seed {seed + round_}: {error}" for error in errors]
                shown = " ".join("X-API-Key: [key]" if part.startswith("X-API-Key") else part for part in command)
                tally.runs.append(
                    {
                        "mode": mode,
                        "seed": seed + round_,
                        "requests": sent,
                        "exit": status,
                        "seconds": round(seconds, 1),
                        "command": shown,
                    }
                )
                print(f"round {round_} {mode}: {sent} requests in {seconds:.0f}s, exit {status}", flush=True)
                if sent == 0:
                    raise RuntimeError(f"schemathesis sent no request; see {report_dir / 'output.txt'}")
            round_ += 1
        log = server.log_path.read_text(encoding="utf-8", errors="replace")
    summary = {
        "requests": sum(tally.requests.values()),
        "requests_by_mode": dict(tally.requests),
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "responses_5xx": tally.server_errors,
        "check_failures": dict(tally.failures),
        "schema_violations": sum(
            n
            for name, n in tally.failures.items()
            if name.endswith("_conformance") or name.startswith("positive") or name.startswith("negative")
        ),
        "4xx_not_json_error": tally.bad_4xx,
        "server_log_tracebacks": log.count("Traceback"),
        "schemathesis_errors": tally.tool_errors,
        "runs": tally.runs,
        "examples": tally.examples,
        "ok": tally.ok() and "Traceback" not in log,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(
    requests: Annotated[int, typer.Option(help="requests to send in all (keyed and unkeyed together)")] = 10_000,
    examples: Annotated[int, typer.Option(help="schemathesis --max-examples of each run")] = 100,
    seed: Annotated[int, typer.Option(help="seed of the first round (the next rounds add 1)")] = 0,
    # One worker: hypothesis describing filters with ast.parse from two threads crashed on Python 3.11
    # ("AST constructor recursion depth mismatch"), which ends a phase early.
    workers: Annotated[int, typer.Option(help="schemathesis --workers")] = 1,
    out: Annotated[
        Path | None, typer.Option(help="reports and summary.json here (default: a temporary folder)")
    ] = None,
    repo: Annotated[Path, typer.Option(help="serve from this checkout (to compare with another version)")] = REPO,
    config: Annotated[
        Path | None, typer.Option(help="a schemathesis.toml for every run (schemathesis --config-file)")
    ] = None,
) -> None:
    """Fuzz the API and print the summary; exit 1 on any 5xx, failed check or 4xx that is not a JSON error."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = fuzz(requests, examples, seed, workers, out or Path(tmp), repo=repo, config=config)
        brief = {k: v for k, v in summary.items() if k not in ("runs", "examples")}
        print(json.dumps(brief, indent=2))
        if not summary["ok"]:
            print(json.dumps(summary["examples"], indent=2)[:20_000], file=sys.stderr)
            raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
