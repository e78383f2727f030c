#!/usr/bin/env bash
# The serving check on many cores (issue 36): `/search` at 128 clients against the one-query FAISS scan floor ×
# the server's cores, and `/match` p99 at 32 clients (100k adverts, 20 kB pages), both with `ssi serve`'s
# defaults (the worker group follows the usable cores). The server runs on SERVER_CPUS and the load generator
# (wrk) on LOAD_CPUS, so that they never share a core; on a 16-core machine that is 14 cores and 2.
#
#   bash scripts/serve_check.sh [OUT_FOLDER]        (default: serve-check)
#
# BUNDLE: the model bundle folder (required). PASSAGES: JSONL of 60-word passages (id, title, text): the /search
# corpus, the adverts (its first ADS), and the pages' text (passages laid end to end); default: cut from
# $DATA/docs.jsonl.gz (DATA: the Wikispeedia folder, default ../shared/data/wikispeedia).
# PYTHON (python3, the project importable, e.g. PYTHONPATH=.), WRK (wrk; it is required: the Python client would
# run on the server's cores), SERVER_CPUS / LOAD_CPUS (taskset lists; default all cores but the last two / the
# last two; below 4 cores both default to no pinning), SECONDS_PER_LEVEL (10: seconds of load), SEARCH_CLIENTS (128),
# MATCH_CLIENTS (32), ADS (100000), PAGE_KB (20), PASSAGE_COUNT (100000, when cutting), WORK (a new temp folder),
# STEP_TIMEOUT (600: seconds each benchmark may run). /match runs first, then /search (without the restart timing).
# COMPARE: settings of the served process (`ssi bench --setting`), space-separated, e.g. "int8_gemm=false": each
# runs /search once more with it, after the defaults' run, so that one check says what a setting does there.
# What it writes: machine.txt, search.log + search.json and match.log + match.json (`ssi bench`'s reports),
# summary.txt + summary.json (python -m benchmarks.serve_check: each must-show, MET or NOT MET); for each COMPARE
# setting S, search-S.log + search-S.json and summary-S.txt + summary-S.json (S with = and , as _).
set -euo pipefail

out="${1:-serve-check}"
py="${PYTHON:-python3}"
data="${DATA:-../shared/data/wikispeedia}"
seconds="${SECONDS_PER_LEVEL:-10}"
search_clients="${SEARCH_CLIENTS:-128}"
match_clients="${MATCH_CLIENTS:-32}"
ads="${ADS:-100000}"
page_kb="${PAGE_KB:-20}"
work="${WORK:-$(mktemp -d)}"
step_timeout="${STEP_TIMEOUT:-600}"
bundle="${BUNDLE:?BUNDLE: the model bundle folder to serve}"
mkdir -p "$out" "$work/bin"
status=0

cores="$("$py" -c 'import os; print(len(os.sched_getaffinity(0)))')"
if ! command -v taskset >/dev/null; then
    echo "serve_check: no taskset here: the server and the load generator share every core" >&2
    server_cpus="" load_cpus=""
elif [ "$cores" -ge 4 ]; then
    server_cpus="${SERVER_CPUS-0-$((cores - 3))}"
    load_cpus="${LOAD_CPUS-$((cores - 2)),$((cores - 1))}"
else
    server_cpus="${SERVER_CPUS-}"
    load_cpus="${LOAD_CPUS-}"
fi

# wrk, pinned to LOAD_CPUS: `ssi bench` runs the `wrk` it finds on PATH (service.bench.wrk).
real_wrk="$(command -v "${WRK:-wrk}")" || { echo "serve_check: no wrk (set WRK to its path)" >&2; exit 2; }
version="$("$real_wrk" -v 2>&1 || true)"
case "$version" in
    wrk*) ;;
    *) echo "serve_check: $real_wrk does not run: $version" >&2; exit 2 ;;
esac
if [ -n "$load_cpus" ]; then
    printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "$load_cpus" "$real_wrk" >"$work/bin/wrk"
else
    printf '#!/bin/sh\nexec %s "$@"\n' "$real_wrk" >"$work/bin/wrk"
fi
chmod +x "$work/bin/wrk"
export PATH="$work/bin:$PATH"
on_server_cpus=()
if [ -n "$server_cpus" ]; then
    on_server_cpus=(taskset -c "$server_cpus")
fi

{
    echo "cores usable: $cores; server on: ${server_cpus:-any}; load generator on: ${load_cpus:-any}"
    echo "wrk: $real_wrk (${version%%$'\n'*})"
    "$py" -c 'import platform; print("python", platform.python_version(), platform.platform())'
    lscpu 2>/dev/null | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket)" || true
    git rev-parse HEAD 2>/dev/null || echo "commit: ${COMMIT:-not a git checkout}"
    uptime
} | tee "$out/machine.txt"

passages="${PASSAGES:-}"
if [ -z "$passages" ]; then
    passages="$work/passages.jsonl"
    echo "==> cutting $data/docs.jsonl.gz into 60-word passages ($passages)"
    "$py" -c "import sys; from pathlib import Path; from service.bench.queries import passage_corpus; \
passage_corpus(Path(sys.argv[1]), Path(sys.argv[2]), 60, int(sys.argv[3]))" \
        "$data/docs.jsonl.gz" "$passages" "${PASSAGE_COUNT:-100000}"
fi

echo "==> /match, ${ads} adverts, ${page_kb} kB pages, ${match_clients} clients"
timeout -k 10 "$step_timeout" "${on_server_cpus[@]}" "$py" -m ssi_cli bench --scenario match \
    --bundle "$bundle" --corpus "$passages" --ads "$ads" --page-kb "$page_kb" --pages 20 \
    --clients "$match_clients" --seconds "$seconds" --work-dir "$work/match" --out "$out/match.json" 2>&1 \
    | tee "$out/match.log" || status=1

search_run() {  # the /search run: its name (search, search-S) and extra `ssi bench` arguments
    local name="$1"
    shift
    timeout -k 10 "$step_timeout" "${on_server_cpus[@]}" "$py" -m ssi_cli bench --bundle "$bundle" \
        --corpus "$passages" --index-types flat --no-restart --clients "$search_clients" --seconds "$seconds" \
        --queries 300 --work-dir "$work/search" --out "$out/$name.json" "$@" 2>&1 | tee "$out/$name.log" || status=1
}

summary() {  # the must-shows of one /search run (its name) and the /match run, into summary[-S].{txt,json}
    "$py" -m benchmarks.serve_check --search "$out/$1.json" --match "$out/match.json" \
        --search-clients "$search_clients" --match-clients "$match_clients" --out "$out/summary$2.json" \
        | tee "$out/summary$2.txt" || status=1
}

echo "==> /search, flat, ${search_clients} clients, ssi serve's defaults on ${server_cpus:-every core}"
search_run search
for setting in ${COMPARE:-}; do
    tag="${setting//[=,]/_}"
    echo "==> /search again, with the setting $setting"
    search_run "search-$tag" --setting "$setting"
done

echo "==> summary"
summary search ""
for setting in ${COMPARE:-}; do
    tag="${setting//[=,]/_}"
    echo "==> summary with the setting $setting"
    summary "search-$tag" "-$tag"
done
[ -n "${WORK:-}" ] || rm -rf "$work"
echo "==> written to $out (status $status)"
exit $status
