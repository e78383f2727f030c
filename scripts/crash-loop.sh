#!/usr/bin/env bash
# The crash loop (the issue's kill -9 test): SIGKILL the real server at random moments during bursts of
# writes from several clients, restart it, and check after every restart that every acknowledged write
# is there, every acknowledged delete is gone, the index loads, and search equals brute force.
#
#   scripts/crash-loop.sh [--kills 50] [--writers 4] [--documents 1500] [--out FILE] ...
#       [--burst-min-writes 20] [--burst-max-writes 150] [--kill-while-loading 0.15] [--workers 1]
#
# A burst ends after a random number of acknowledged puts (between the two --burst-*-writes), not after a
# time. Runs benchmarks/crash_loop.py in the environment made by scripts/install.sh ($VENV, default .venv);
# the figures go to bench-results/crash-loop.json. CI runs a 3-kill version as a test
# (tests/service/test_durability_crash_loop.py).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$root/.venv}"
if [[ ! -x "$venv/bin/python" ]]; then
    echo "crash-loop.sh: no environment at $venv; run scripts/install.sh first" >&2
    exit 1
fi
cd "$root"
exec "$venv/bin/python" -m benchmarks.crash_loop "$@"
