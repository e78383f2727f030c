#!/usr/bin/env bash
# The project's test command (the README's second quick-start command; CI runs exactly this).
#
#   scripts/test.sh [PYTEST ARGS...]
#
# Lints with ruff and checks the import contracts in pyproject.toml with lint-imports (LINT=0 skips
# both), builds the documentation site with `mkdocs build --strict` into a temporary folder (a broken
# link, a missing page or a failing generated page fails it; DOCS=0 skips it), then runs pytest in the
# environment made by scripts/install.sh ($VENV, default .venv): spread over $WORKERS pytest-xdist worker
# processes (default 3: one more than the cores, since many tests wait on servers, but not so many that every unit
# waits on the others for a core; WORKERS=0 runs in this process),
# a module to a worker (tests/conftest.py), with line and branch coverage printed file by file and summed by
# package (COVERAGE=0 skips it), the ten slowest phases and the tests over the one-test budget
# (docs/contributing.md).
# With PYTEST_BUDGET_SECONDS set (.ci/run sets it: 1.5 × the suite's 12-minute budget, room for a noisy machine),
# a pytest run that takes longer fails even when every test passed, saying by how much (docs/contributing.md).
# Tests that need ../shared/data or Debian's chromium skip with a message when those are absent
# (set SSI_REQUIRE_BROWSER=1 to make a missing browser an error, as CI does), and the wrk load test
# when wrk is absent (SSI_REQUIRE_WRK=1 makes that an error).
# A run that collects no test fails: a green run must have tested something.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$root/.venv}"
py="$venv/bin/python"
if [[ ! -x "$py" ]]; then
    echo "test.sh: no environment at $venv; run scripts/install.sh first" >&2
    exit 1
fi
cd "$root"
export PATH="$venv/bin:$PATH"

if [[ "${LINT:-1}" != 0 ]]; then
    echo "==> ruff check"
    "$py" -m ruff check .
    echo "==> lint-imports"
    "$venv/bin/lint-imports"
fi

if [[ "${DOCS:-1}" != 0 ]]; then
    echo "==> mkdocs build --strict"
    site="$(mktemp -d)"
    NO_MKDOCS_2_WARNING=1 "$py" -m mkdocs build --strict --site-dir "$site" || {
        rm -rf "$site"
        exit 1
    }
    rm -rf "$site"
fi

# The project's own bytecode, compiled once: an editable install leaves its modules uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set (as on these 2-core machines) every process the suite starts (some 240: servers
# and their workers, Serve replicas, trainers, CLI calls) compiled them again, 0.3-0.5 s of CPU each
# (docs/contributing.md). Python reads these files whatever that variable says, and recompiles any whose source
# has changed since.
"$py" -m compileall -q -j 0 service training cluster ssi_cli benchmarks tests ssi >/dev/null

echo "==> pytest"
args=()
workers="${WORKERS:-3}"
if [[ "$workers" != 0 ]]; then
    args+=(-n "$workers" --dist loadscope --no-loadscope-reorder)
fi
report=""
if [[ "${COVERAGE:-1}" != 0 ]]; then
    report="$(mktemp -d)/coverage.json"
    args+=(--cov --cov-report=term "--cov-report=json:$report")
fi
status=0
started=$(date +%s.%N)
"$py" -m pytest "${args[@]}" "$@" || status=$?
took=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [[ $status -eq 5 ]]; then
    echo "test.sh: pytest collected no tests; failing on purpose" >&2
    exit 1
fi
budget="${PYTEST_BUDGET_SECONDS:-}"
if [[ -n "$budget" ]]; then
    if awk -v t="$took" -v b="$budget" 'BEGIN { exit !(t > b) }'; then
        echo "test.sh: pytest took $took s, over its budget of $budget s (PYTEST_BUDGET_SECONDS): the suite is too" \
            "slow; the units and tests listed above under 'test budget' say where the time went" >&2
        [[ $status -ne 0 ]] || status=3
    else
        echo "==> pytest took $took s (budget $budget s)"
    fi
else
    echo "==> pytest took $took s"
fi
if [[ -n "$report" && -f "$report" ]]; then
    echo "==> coverage by package (line and branch)"
    "$py" "$root/scripts/coverage_by_package.py" "$report"
    rm -rf "$(dirname "$report")"
fi
exit $status
