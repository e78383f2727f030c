"""The whole API under schemathesis (issue 14, defect 13): every operation, every check, with and without
the write key, on a real server; no 5xx, no schema violation, every 4xx a JSON error with a message.

A short run (a few hundred requests per mode); `scripts/fuzz-api.sh` runs the long one (≥ 10,000).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fuzz_api import fuzz


def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    """Slow: schemathesis generates and sends requests for every operation of the OpenAPI schema."""
    pytest.importorskip("schemathesis", reason="schemathesis is in the test extra: pip install -e '.[test]'")
    summary = fuzz(requests=600, examples=3, seed=7, workers=1, out=tmp_path)
    assert summary["requests"] >= 600
    assert set(summary["requests_by_mode"]) == {"keyed", "unkeyed"}
    assert summary["responses_5xx"] == 0, summary["examples"]
    assert summary["check_failures"] == {}, summary["examples"]
    assert summary["4xx_not_json_error"] == 0, summary["examples"]
    assert summary["server_log_tracebacks"] == 0 and summary["schemathesis_errors"] == []
    assert summary["ok"]
