# The trainer: PyTorch (CPU build) + the training extras. It writes a servable folder (corpus.jsonl +
# bundle/) into /data from your files in /input, or from the generated demo corpus when /input is empty.
# Build from the repository root:  docker build -f docker/trainer.Dockerfile -t ssi-search-trainer .
FROM python:3.11-slim

# The pinned torch comes from PyTorch's CPU-only wheel index: the default wheel on the public index is
# a multi-GB CUDA build. Override with --build-arg TORCH_INDEX_URL=... (an empty value uses pip's default).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

WORKDIR /app
COPY pyproject.toml README.md ./
COPY scripts/ scripts/
COPY ssi/ ssi/
COPY ssi_cli/ ssi_cli/
COPY training/ training/
COPY service/ service/

# The same install script as the quick start and CI, with the training extras (it installs torch==2.13.0 first).
RUN TORCH_INDEX_URL="$TORCH_INDEX_URL" bash scripts/install.sh --venv /opt/venv --extras train --no-editable \
    && ssi train --help >/dev/null

RUN useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin ssi \
    && mkdir -p /data /input \
    && chown ssi:ssi /data
USER ssi

ENV SSI_TRAIN_MAX_MINUTES=10
VOLUME ["/data"]

CMD ["bash", "/app/scripts/train-bundle.sh", "--data", "/data", "--input", "/input", "--or-demo"]
