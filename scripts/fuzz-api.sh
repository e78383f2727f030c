#!/usr/bin/env bash
# Fuzz the whole HTTP API with schemathesis (every operation of the OpenAPI schema, `--checks all`).
#
#   scripts/fuzz-api.sh [--requests N] [--examples M] [--seed S] [--workers W] [--out DIR] [--repo DIR] [--config F]
#
#   --requests N   requests to send in all, with and without the write key (default: 10000)
#   --examples M   schemathesis --max-examples of each run (default: 100)
#   --out DIR      keep the reports and summary.json there (default: a temporary folder)
#   --repo DIR     serve from another checkout, to compare versions (default: this one)
#   --config F     a schemathesis.toml for its runs (default: none; the CI test's leaves some coverage phases out)
#
# Starts `python -m service serve` with a write key on a small generated collection, runs
# schemathesis rounds (keyed, then unkeyed, a new seed each round) until N requests were sent, and
# prints the figures: requests, statuses, responses >= 500, failed checks (schema violations
# included), 4xx answers that are not a JSON error with a message. Exits 1 if any is not zero.
# A short run of the same (~700 requests) is tests/service/test_http_fuzz.py, in CI.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$root/.venv}"
py="$venv/bin/python"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
    exit 0
fi
if [[ ! -x "$py" ]]; then
    echo "fuzz-api.sh: no environment at $venv; run scripts/install.sh first" >&2
    exit 1
fi
cd "$root"
exec "$py" -m benchmarks.fuzz_api "$@"
