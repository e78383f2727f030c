# The search service: FastAPI + uvicorn + FAISS + onnxruntime, and no PyTorch.
# Build from the repository root:  docker build -f docker/service.Dockerfile -t ssi-search-service .
# Run: mount a folder holding bundle/ and corpus.jsonl (written by the trainer image) at /data, and a
# volume at /store for the document store (documents written through the API: data, not cache).
# Stop with a grace period over 30 s (docker stop -t 45): the graceful shutdown takes up to 30 s.
FROM python:3.11-slim

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

# The same install script as the quick start and CI, with the serving extras (and the sentence encoder's
# tokenizer, for hybrid bundles) only; then prove no torch came along.
RUN bash scripts/install.sh --venv /opt/venv --extras serve,encoder --no-editable \
    && python -c "import importlib.util, sys; sys.exit('torch must not be in the service image' if importlib.util.find_spec('torch') else 0)" \
    && ssi serve --help >/dev/null

RUN useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin ssi \
    && mkdir -p /data /cache /store \
    && chown ssi:ssi /cache /store
USER ssi

ENV SSI_HOST=0.0.0.0 \
    SSI_PORT=8000 \
    SSI_CACHE_DIR=/cache \
    SSI_DATA_DIR=/store
EXPOSE 8000
VOLUME ["/cache", "/store"]

HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "/app/scripts/healthcheck.py", "/readyz"]
CMD ["ssi", "serve", "--bundle", "/data/bundle", "--corpus", "/data/corpus.jsonl", "--host", "0.0.0.0"]
