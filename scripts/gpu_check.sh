#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, in a few minutes, the GPU tests, the block trainer's
# throughput on the Wikispeedia shape and the validation MAP of a Wikispeedia model trained for 60 s there,
# each written to one folder.
#
#   bash scripts/gpu_check.sh [OUT_FOLDER]        (default: gpu-check)
#
# DATA: the Wikispeedia folder (default ../shared/data/wikispeedia); PYTHON: the interpreter whose PyTorch
# sees the GPU (default: python3; the project's packages importable, e.g. PYTHONPATH=.); SECONDS_TRAIN: the
# training budget (default 60); THREADS: CPU threads for validation (default 2); DEVICE: cuda (cpu makes the
# same files on a machine without one, slowly).
# What it writes: device.txt, tests.log, train_throughput.json (+ .txt), train_gpu.json (ssi train's summary),
# eval.txt (ssi eval's table: MAP ± standard error on the validation links, BM25 beside it), encode_device.json
# (passages encoded a second by the sentence encoder on the GPU and on every CPU core, fp32 and int8).
# The reference is a 15-minute CPU run of the same command (--device cpu --max-minutes 15): see
# docs/performance/training.md for its figure and how to compare.
set -euo pipefail

out="${1:-gpu-check}"
data="${DATA:-../shared/data/wikispeedia}"
py="${PYTHON:-python3}"
budget="${SECONDS_TRAIN:-60}"
device="${DEVICE:-cuda}"
work="$(mktemp -d)"
mkdir -p "$out"
status=0

echo "==> device" | tee "$out/device.txt"
"$py" - <<'EOF' 2>&1 | tee -a "$out/device.txt"
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cores", os.cpu_count())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(torch.cuda.get_device_name(0), f"{p.total_memory / 2**30:.0f} GiB", p.multi_processor_count, "SMs")
else:
    print("no GPU: the GPU tests skip")
EOF

echo "==> GPU tests (and the device path's CPU tests)"
"$py" -m pytest -q -p no:cacheprovider tests/training/test_gpu.py tests/training/test_device.py 2>&1 \
    | tee "$out/tests.log" || status=1

echo "==> throughput: block trainer on the Wikispeedia shape (N=100, D=30,000, 512 queries a step), 20 s"
"$py" -m benchmarks.train_throughput --corpus "$data/docs.jsonl.gz" --pairs "$data/links.train.tsv.gz" \
    --seconds 20 --threads 2 --device "$device" --out "$out/train_throughput.json" 2>&1 \
    | tee "$out/train_throughput.txt" || status=1

echo "==> quality: ssi train for ${budget} s on the $device, validation MAP"
minutes="$("$py" -c "print($budget / 60)")"
"$py" -m ssi_cli train --corpus "$data/docs.jsonl.gz" --pairs "$data/links.train.tsv.gz" \
    --valid-pairs "$data/links.valid.tsv.gz" --out "$work/wiki" --frequent-words 10000 \
    --max-minutes "$minutes" --threads "${THREADS:-2}" --device "$device" --no-progress >"$out/train_gpu.json" \
    2> >(tail -20 >&2) || status=1
"$py" -c "import json,sys; s=json.load(open(sys.argv[1])); print('device', s['device'], 'steps', s['steps'], \
'triples/s', s['triples_per_second'], 'valid MAP', round(s['valid']['map'], 4), 'best step', s['best_step'])" \
    "$out/train_gpu.json" || status=1
"$py" -c "import ranx" 2>/dev/null || echo "ssi eval needs ranx (the train extra); its standard errors will be missing"
"$py" -m ssi_cli eval --bundle "$work/wiki" --corpus "$data/docs.jsonl.gz" --pairs "$data/links.train.tsv.gz" \
    --eval-pairs "$data/links.valid.tsv.gz" --baselines bm25 --no-tune --out "$work/eval" 2>&1 \
    | tee "$out/eval.txt" || status=1
echo "==> documents encoded on the GPU against the CPU (SSI_ENCODE_DEVICE; needs onnxruntime-gpu, else the CPU alone)"
"$py" -m benchmarks.encode_device --corpus "$data/docs.jsonl.gz" --out "$out/encode_device.json" 2>&1 \
    | tail -40 || status=1
rm -rf "$work"
echo "==> written to $out (status $status)"
exit $status
