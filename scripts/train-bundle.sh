#!/usr/bin/env bash
# Prepare a servable folder: a corpus and a trained model bundle (the quick start and the trainer image use this).
#
#   scripts/train-bundle.sh --data DIR [--input DIR [--or-demo]] [--minutes M] [--retrain] [-- EXTRA `ssi train` FLAGS]
#
#   --data DIR     where to write DIR/corpus.jsonl (the documents to serve) and DIR/bundle (the model)
#   --input DIR    your own data: DIR/corpus.jsonl and DIR/train_pairs.tsv, optionally DIR/valid_pairs.tsv
#                  (gzip allowed as .jsonl.gz / .tsv.gz). Without it, the demo corpus is generated into
#                  DIR/generated.
#   --or-demo      with --input: use the demo corpus when DIR holds no corpus (docker compose mounts an
#                  input folder that may be empty)
#   --minutes M    training time budget in minutes (default: $SSI_TRAIN_MAX_MINUTES, else 2)
#   --retrain      train even if DIR/bundle was already trained from the same input files
#
# Everything after `--` goes to `ssi train` as is (e.g. `-- --threads 2`). The `ssi` and `python` of the
# active environment (PATH) are used.
set -euo pipefail

data=""
input=""
minutes="${SSI_TRAIN_MAX_MINUTES:-2}"
retrain=0
or_demo=0
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --data) data="$2"; shift 2 ;;
        --input) input="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        --retrain) retrain=1; shift ;;
        --or-demo) or_demo=1; shift ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "train-bundle.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
[[ -n "$data" ]] || { echo "train-bundle.sh: --data DIR is required" >&2; exit 2; }
mkdir -p "$data"

first_of() { for f in "$@"; do [[ -f "$f" ]] && { echo "$f"; return 0; }; done; return 1; }

if [[ -n "$input" && $or_demo -eq 1 ]] && ! first_of "$input/corpus.jsonl" "$input/corpus.jsonl.gz" >/dev/null; then
    echo "==> no corpus.jsonl in $input: using the demo corpus"
    input=""
fi
if [[ -n "$input" ]]; then
    corpus_in="$(first_of "$input/corpus.jsonl" "$input/corpus.jsonl.gz")" \
        || { echo "train-bundle.sh: no corpus.jsonl(.gz) in $input" >&2; exit 1; }
    pairs="$(first_of "$input/train_pairs.tsv" "$input/train_pairs.tsv.gz")" \
        || { echo "train-bundle.sh: no train_pairs.tsv(.gz) in $input" >&2; exit 1; }
    valid="$(first_of "$input/valid_pairs.tsv" "$input/valid_pairs.tsv.gz" || true)"
else
    if [[ ! -f "$data/generated/corpus.jsonl" ]]; then
        echo "==> generating the demo corpus into $data/generated"
        python -m training.demo_corpus --out "$data/generated"
    fi
    corpus_in="$data/generated/corpus.jsonl"
    pairs="$data/generated/train_pairs.tsv"
    valid="$data/generated/valid_pairs.tsv"
fi

# The bundle is retrained only when its inputs or the extra flags change.
fingerprint="$(cat "$corpus_in" "$pairs" ${valid:+"$valid"} <(echo "minutes=$minutes ${extra[*]:-}") | sha256sum | cut -d' ' -f1)"
if [[ $retrain -eq 0 && -f "$data/bundle/manifest.json" && -f "$data/corpus.jsonl" \
      && "$(cat "$data/bundle.inputs" 2>/dev/null || true)" == "$fingerprint" ]]; then
    echo "==> $data/bundle is up to date with its inputs (pass --retrain to train again)"
    exit 0
fi

# The served corpus is a copy of the one trained on, so the bundle and the documents always belong together.
echo "==> copying the corpus to $data/corpus.jsonl"
tmp="$data/.corpus.jsonl.tmp"
case "$corpus_in" in
    *.gz) gzip -dc "$corpus_in" >"$tmp" ;;
    *) cp "$corpus_in" "$tmp" ;;
esac
mv "$tmp" "$data/corpus.jsonl"

echo "==> training (at most $minutes minutes)"
ssi train --corpus "$data/corpus.jsonl" --pairs "$pairs" ${valid:+--valid-pairs "$valid"} \
    --out "$data/bundle" --max-minutes "$minutes" ${extra[@]+"${extra[@]}"}
echo "$fingerprint" >"$data/bundle.inputs"
echo "==> bundle written to $data/bundle"
