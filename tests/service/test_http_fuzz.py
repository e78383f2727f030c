"""The whole API under schemathesis (issue 14, defect 13): every operation, every check, with and without
the write key, on a real server; no 5xx, no schema violation, every 4xx a JSON error with a message.

A short run (one round: ~650 requests with the key, every operation in each pass); `scripts/fuzz-api.sh`
runs the long one (≥ 10,000), with schemathesis's coverage phase on every operation.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from benchmarks import fuzz_api

# The pass without the key leaves out schemathesis's coverage phase: it sends the same deterministic boundary
# cases as the keyed pass, which a read operation answers alike with or without the key and a write operation
# answers with 401 before reading them. Its fuzzing and stateful phases still send every operation anonymous
# requests under every check.
ANONYMOUS_PHASES = "examples,fuzzing,stateful"

# The keyed pass's coverage phase (schemathesis's deterministic boundary cases, positive and negative, of every
# parameter and body field) only where its cases find something the others do not; every operation still gets the
# fuzzing and stateful phases with and without the key. schemathesis.toml, by operation:
COVERAGE_WHERE_NEW = """
# The operations mounted twice (service.app includes the same routers again under /collections/{collection}): the
# short form's cases are the long form's with the default collection, to the same handler and models, so only the
# long form gets them (with its collection parameter's cases besides).
[[operations]]
include-path-regex = "^/(search|clicks|documents|model|words)"
phases.coverage.enabled = false

# The advert operations: this world has no adverts collection, so their cases (~460) all got a 404 or a 409 (no
# such collection, or not an adverts one) before any body was read.
[[operations]]
include-path-regex = "/(adverts|match)"
phases.coverage.enabled = false
"""


def operations_sent(report_dir: Path) -> tuple[dict[str, set[str]], int]:
    """The operations a schemathesis run sent requests to, by phase (from its NDJSON report), and how many the
    schema has."""
    sent: dict[str, set[str]] = {}
    for report in report_dir.glob("*.ndjson"):
        for line in report.read_text(encoding="utf-8").splitlines():
            finished = json.loads(line).get("ScenarioFinished", {})
            recorder = finished.get("recorder", {})
            if recorder.get("interactions") and recorder.get("label", "").split(" ")[0].isupper():
                sent.setdefault(finished.get("phase", ""), set()).add(recorder["label"])
    output = (report_dir / "output.txt").read_text(encoding="utf-8", errors="replace")
    selected = re.search(r"Operations:\s+(\d+) selected / (\d+) total", output)
    assert selected and selected.group(1) == selected.group(2), output[:2000]
    return sent, int(selected.group(2))


def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    """Slow: schemathesis generates and sends requests for every operation of the OpenAPI schema (its coverage
    phase alone ~600, with the key), in two schemathesis runs that each build their generators for all of them."""
    pytest.importorskip("schemathesis", reason="schemathesis is in the test extra: pip install -e '.[test]'")
    config = tmp_path / "schemathesis.toml"
    config.write_text(COVERAGE_WHERE_NEW, encoding="utf-8")
    # One example an operation in the fuzzing phase (its cost is per example): the long run fuzzes.
    summary = fuzz_api.fuzz(
        requests=500,
        examples=1,
        seed=7,
        workers=1,
        out=tmp_path,
        extra_by_mode={"unkeyed": ["--phases", ANONYMOUS_PHASES]},
        config=config,
    )
    assert summary["requests"] >= 500 and len(summary["runs"]) == 2  # one round: the keyed coverage phase ran
    assert set(summary["requests_by_mode"]) == {"keyed", "unkeyed"}
    for mode in fuzz_api.MODES:
        sent, total = operations_sent(tmp_path / f"round-000-{mode}")
        every = set().union(*sent.values())
        assert len(every) == total and len(sent["fuzzing"]) == total, (mode, sorted(every))
    # The coverage phase ran on every operation but those the configuration leaves out.
    sent, _ = operations_sent(tmp_path / "round-000-keyed")
    left_out = [re.compile(rule["include-path-regex"]) for rule in tomllib.loads(COVERAGE_WHERE_NEW)["operations"]]
    operations = set().union(*sent.values())
    covered = {label for label in operations if not any(rule.search(label.split(" ")[1]) for rule in left_out)}
    assert sent["coverage"] == covered and len(covered) >= 15, sorted(sent["coverage"] ^ covered)
    assert summary["responses_5xx"] == 0, summary["examples"]
    assert summary["check_failures"] == {}, summary["examples"]
    assert summary["4xx_not_json_error"] == 0, summary["examples"]
    assert summary["server_log_tracebacks"] == 0 and summary["schemathesis_errors"] == []
    assert summary["ok"]
