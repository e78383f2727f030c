#!/usr/bin/env bash
# The whole demo in one command: install, generate the demo corpus, train a model, serve it.
#
#   scripts/quickstart.sh [--host H] [--port P] [--minutes M] [--retrain] [--data DIR] [--venv DIR]
#
#   --host, --port   where to serve (default: $SSI_HOST or 127.0.0.1, $SSI_PORT or 8000)
#   --minutes M      training time budget (default: 2)
#   --retrain        train again even if the demo bundle is up to date
#   --data DIR       working folder for the corpus, bundle and index cache (default: demo/)
#   --venv DIR       virtual environment (default: .venv)
#
# Stop the server with Ctrl-C; running the command again skips the install and the training.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
host="${SSI_HOST:-127.0.0.1}"
port="${SSI_PORT:-8000}"
minutes=2
data="$root/demo"
venv="$root/.venv"
train_flags=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --host) host="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        --retrain) train_flags+=(--retrain); shift ;;
        --data) data="$2"; shift 2 ;;
        --venv) venv="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "quickstart.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

bash "$root/scripts/install.sh" --venv "$venv"
export PATH="$venv/bin:$PATH"
cd "$root"

bash "$root/scripts/train-bundle.sh" --data "$data" --minutes "$minutes" ${train_flags[@]+"${train_flags[@]}"}

# The adverts collection beside the documents: each demo document's title and first sentence is an
# advert, and its links are clicks (`ssi clicks links`); an asymmetric model (pages -> adverts) is
# trained on them, once. POST /match and the page's "Match ads" view use it.
if [[ ! -f "$data/ads-bundle/manifest.json" || ${#train_flags[@]} -gt 0 ]]; then
    echo "==> making the demo adverts and training their model (at most 1 minute)"
    ssi clicks links --corpus "$data/corpus.jsonl" --train-links "$data/generated/train_pairs.tsv" \
        --valid-links "$data/generated/valid_pairs.tsv" --out "$data/ads" >/dev/null
    ssi train --corpus "$data/ads/ads.jsonl" --pages "$data/ads/pages.jsonl" --clicks "$data/ads/clicks.train.jsonl" \
        --valid-clicks "$data/ads/clicks.valid.jsonl" --out "$data/ads-bundle" --max-minutes 1 --dims 64 >/dev/null
fi
export SSI_COLLECTIONS="$(python -c 'import json, sys; print(json.dumps({"ads": {"bundle": sys.argv[1], "corpus": sys.argv[2], "type": "adverts"}}))' "$data/ads-bundle" "$data/ads/ads.jsonl")"

export SSI_CACHE_DIR="${SSI_CACHE_DIR:-$data/cache}"
echo "==> serving the demo at http://$host:$port  (search page: /, match ads: /#/match, API docs: /docs; Ctrl-C stops)"
exec ssi serve --bundle "$data/bundle" --corpus "$data/corpus.jsonl" --host "$host" --port "$port"
