"""The service's one configuration object, fed by `SSI_*` environment variables and `ssi serve` flags.

It validates everything a running service depends on up front and refuses unsafe combinations
(unauthenticated writes on a public address, a short API key) with a message that says what to
change, so a misconfiguration stops the process at start instead of surfacing as a bad request later.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.cores import MAX_WORKERS, serve_sizes, usable_cores
from ssi.fields.errors import FieldError
from ssi.fields.filter_form import check_filter_form
from ssi.fields.schema_file import read_schema
from ssi.fields.types import FieldType

DEFAULT_COLLECTION = "documents"
COLLECTION_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
MIN_API_KEY_CHARS = 16

IndexType = Literal["flat", "hnsw", "ivf"]
# What a collection holds: documents are searched with short queries or a document ("more like
# this"); adverts are matched with a whole page as the query (the ads route comes in its own issue).
CollectionType = Literal["documents", "adverts"]


def _keys_file(path: Path) -> list[KeyFilter]:
    """The filtered read keys of SSI_READ_KEYS_FILE: a JSON object key → filter."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"SSI_READ_KEYS_FILE {path}: {exc}") from None
    listed = key_filters(value, f"SSI_READ_KEYS_FILE {path}")
    return [KeyFilter.model_validate(entry) for entry in listed]  # type: ignore[union-attr]


def default_threads() -> int:
    """Two threads at most by default: one process serves many requests, each mostly single-threaded; fewer
    where the process may use fewer cores (a container's CPU quota, an affinity mask: service.cores)."""
    return max(1, min(2, usable_cores().usable))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class CollectionSpec(BaseModel):
    """Where a named collection's model and initial documents come from, and what it holds."""

    model_config = ConfigDict(extra="forbid")

    bundle: Path
    corpus: Path | None = None
    type: CollectionType = "documents"
    # Record this collection's traffic (impressions, clicks); None: as SSI_EVENTS says. An internal collection can
    # stay out of the log while the public one feeds it.
    events: bool | None = None
    # Field types fixed before any document uses the name (service.fields): e.g. {"published": "keyword"} where the
    # first value would otherwise make it a date.
    fields: dict[str, FieldType] = Field(default_factory=dict)


class KeyFilter(BaseModel):
    """A read key with its mandatory filter (service.fields.visibility): its reads see only the documents inside."""

    model_config = ConfigDict(extra="forbid")

    key: SecretStr
    filter: dict[str, Any]


def key_filters(value: object, source: str) -> object:
    """SSI_READ_KEYS (or the file's) JSON object key → filter as a list of KeyFilter; a list passes as it is."""
    if isinstance(value, dict):
        return [{"key": key, "filter": node} for key, node in value.items()]
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{source}: a JSON object of key → filter")
    return value


class Settings(BaseSettings):
    """All knobs of `ssi serve`. Environment: `SSI_<NAME>`; flags of `ssi serve` override it."""

    # populate_by_name: a setting with an environment alias (index_type) is still passed by its name.
    model_config = SettingsConfigDict(env_prefix="SSI_", extra="ignore", validate_default=True, populate_by_name=True)

    # What to serve. `bundle` + `corpus` define the default collection; `collections` adds more by name
    # (JSON in SSI_COLLECTIONS, e.g. {"adverts": {"bundle": "bundles/ads", "corpus": "ads.jsonl"}}).
    bundle: Path | None = None
    corpus: Path | None = None
    collection: str = DEFAULT_COLLECTION
    collections: dict[str, CollectionSpec] = Field(default_factory=dict)
    # A schema file (ssi.fields.schema_file: JSON field name → type) declaring the default collection's field types,
    # as "fields" does in a collection's spec; `ssi serve --schema FILE` or SSI_SCHEMA. Read once, when the settings
    # load: a bad file is an error naming the problem before anything starts.
    schema_file: Path | None = Field(default=None, validation_alias=AliasChoices("SSI_SCHEMA", "schema_file"))
    _schema: dict[str, FieldType] = PrivateAttr(default_factory=dict)  # what schema_file declares
    # Reloads may only name bundles under this folder (default: the parent folder of each configured bundle),
    # so a leaked API key cannot make the service open arbitrary paths.
    bundle_root: Path | None = None

    # Where state lives. The document stores (SQLite, the source of truth for API writes) go to
    # `data_dir` (default: `cache_dir`); index snapshots go to `cache_dir/index` and can be deleted freely.
    cache_dir: Path = Path("cache")
    data_dir: Path | None = None

    # The open vocabulary (ssi.open_vocab, docs/guides/open-vocabulary.md): with open_vocab, a BM25 bundle's
    # lexical part also counts the served documents' words it does not know. On by default; off, nothing is
    # indexed for it and snapshots hold no open_vocab.json (the ranking of the bundle's words alone).
    # At most open_vocab_words such words are indexed per collection (per shard on the Ray cluster), as documents
    # bring them; once full, a document's words not yet held are left out (counted).
    open_vocab: bool = True
    open_vocab_words: int = Field(default=1_000_000, ge=0)
    # Whose statistics the lexical part uses with open_vocab on (ssi.open_vocab): "bundle" (its training corpus's
    # idf and avg_len for its words) or "collection" (every word's idf from the collection's live document
    # frequencies, and the avg_len of the documents its index was computed from: BM25 over the collection).
    open_vocab_statistics: Literal["bundle", "collection"] = "bundle"
    # With the collection's statistics: the avg_len to weigh the lexical rows with where it is not that of the
    # documents the index is computed from. A shard of the Ray cluster is given the whole cluster's (cluster.json),
    # so its rows are one node's; None: its own documents'.
    open_vocab_avg_len: float | None = Field(default=None, gt=0)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"

    # Writes (add/replace/delete documents, reload) need X-API-Key == api_key. Without a key they are
    # refused, unless insecure_writes is set, which is only accepted on a loopback address.
    api_key: SecretStr | None = None
    insecure_writes: bool = False
    # Optional keys of their own (same X-API-Key header): with read_key set, every read route but
    # /healthz and /readyz needs a key (the read, write or admin key); admin_key guards /admin/reload
    # (unset: the write key does). allowed_hosts (comma-separated, '*.example.com' patterns) refuses
    # other Host headers with 400; loopback names stay allowed for the container healthcheck.
    read_key: SecretStr | None = None
    admin_key: SecretStr | None = None
    # Read keys with a mandatory filter (per-key visibility, service.fields.visibility): a JSON object key → filter,
    # e.g. {"acme-read-key-0001": {"term": {"tenant": "acme"}}}, in SSI_READ_KEYS and/or in the file SSI_READ_KEYS_FILE
    # (read at start). Every read made with such a key sees only the documents inside its filter; with any set, reads
    # need a key as with SSI_READ_KEY.
    read_keys: list[KeyFilter] = Field(default_factory=list)
    read_keys_file: Path | None = None
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Index: flat is exact; hnsw and ivf are approximate (their recall is measured by `ssi bench`).
    # SSI_INDEX_KIND, its earlier name, is still read (deprecated: "kind" was ambiguous with the model form).
    index_type: IndexType = Field(default="flat", validation_alias=AliasChoices("SSI_INDEX_TYPE", "SSI_INDEX_KIND"))
    hnsw_m: int = Field(default=32, ge=4, le=256)
    hnsw_ef_construction: int = Field(default=200, ge=8, le=4096)
    hnsw_ef_search: int = Field(default=128, ge=1, le=65536)
    # How HNSW ranks by inner product: "ip" builds the graph on raw inner products, "l2" on the MIPS→L2
    # reduction [x, √(R² − ‖x‖²)] (service.index). On 100k Wikispeedia passages (bundle N = 100) the served
    # ranking's recall@10 at efSearch 128 was 0.958 with ip against 0.790 with l2 (docs/performance/million.md,
    # "Approximate indexes at 1 M"); an earlier model measured the reverse. Part of the cache key.
    hnsw_metric: Literal["ip", "l2"] = "ip"
    ivf_nlist: int = Field(default=0, ge=0, le=1 << 20, description="0: chosen from the collection size")
    ivf_nprobe: int = Field(default=0, ge=0, le=1 << 20, description="0: 6·√nlist (service.index.auto_nprobe)")
    # The FAISS candidate pool K (at least k + offset): a larger K leaves fewer lexical-only candidates
    # to score (service.rerank), but FAISS keeps a K-heap per query: on 100k Wikispeedia passages a flat
    # search with K = 1,024 cost 1.49 ms against 1.32 ms with K = 100, and K = 100 left a median of
    # 204 lexical candidates (21 with 1,024), which the dense rerank scores in less than the difference.
    # An HNSW search grows with K (efSearch ≥ K), so it gets a smaller one.
    candidate_pool: int = Field(default=64, ge=1, le=100_000, description="K of HNSW searches")
    scan_pool: int = Field(default=128, ge=1, le=1_000_000, description="least K of flat and IVF searches")
    # A flat scan's rows by onnxruntime's integer product (service.int8_gemm): about twice as fast as numba's
    # int8 pass in batches, for a packed copy of the codes each worker holds (about their size); false: the
    # scan as before (numba's pass, BLAS's product).
    int8_gemm: bool = True

    # A hybrid bundle's sentence encoder (ssi.sentence): which of its graphs serves, fp32 or int8 (None: the one the
    # bundle records, `ssi train --encoder-precision`); int8 asked of a bundle without an int8 graph serves fp32, and
    # says so in the log. And how many query vectors each process keeps (service.query_vectors; 0: none).
    encoder_precision: Literal["fp32", "int8"] | None = None
    # Where a collection's first build encodes its documents' e(d) (ssi.sentence.providers_for): auto takes a GPU where
    # onnxruntime has its CUDA provider (onnxruntime-gpu), else the CPU; queries are always encoded on the CPU (one
    # short text: a GPU's transfer would cost more than it saves).
    encode_device: Literal["cpu", "cuda", "auto"] = "auto"
    query_cache_size: int = Field(default=10_000, ge=0, le=10_000_000)
    # Which graph encodes a query where the bundle has a query graph (ssi.sentence, `ssi train --query-model`): its own
    # ("query", smaller, distilled towards the encoder) or the documents' ("document", as a bundle without one does).
    query_graph: Literal["query", "document"] = "query"

    # Threads of FAISS/OpenMP and of the onnxruntime session; bounded so requests do not oversubscribe cores.
    threads: int = Field(default_factory=default_threads, ge=1, le=256)
    # Server processes on one socket and one data folder (service.workers): each holds its own index and
    # replays the others' writes from the store before it searches. 1: this process serves alone.
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    # Which worker of a group this process is: set by the supervisor for each worker (service.workers).
    worker_number: int = Field(default=0, ge=0, le=MAX_WORKERS - 1)
    # How long POST /admin/reload in a worker group waits for every worker to serve the new bundle
    # (service.group_reload); past it, the answer says how many do and the others follow.
    reload_wait: float = Field(default=120.0, ge=0.0, le=3600.0)

    # Request bounds.
    max_k: int = Field(default=100, ge=1, le=10_000)
    max_offset: int = Field(default=1000, ge=0, le=1_000_000)
    max_query_chars: int = Field(default=4096, ge=1, le=1_000_000, description="a short query (search)")
    # A long text used as a query (a stored document in /similar, a web page for adverts): tens of kB.
    # Longer texts are cut to max_page_chars, then to their max_page_words most heavily weighted words.
    max_page_chars: int = Field(default=65_536, ge=1, le=10_000_000)
    max_page_words: int = Field(default=2048, ge=1, le=1_000_000, description="distinct words of a long query")
    max_batch: int = Field(default=64, ge=1, le=10_000)
    # Under load, how long a batch of concurrent searches may wait for the rest of its usual size
    # (service.batching); 0: never.
    batch_gather_ms: float = Field(default=2.0, ge=0, le=100)
    # queries × k of one batch: with the defaults (64 × 100) it never binds; it keeps a raised max_k
    # (for single searches) from multiplying into a batch's hits and snippets.
    max_batch_hits: int = Field(default=6400, ge=1, le=1_000_000)
    # Index knobs a request may set: ef_search (HNSW) costs time linearly; nprobe (IVF) lists scanned.
    max_ef_search: int = Field(default=1024, ge=1, le=65_536)
    max_nprobe: int = Field(default=1024, ge=1, le=1 << 20)
    max_documents_per_write: int = Field(default=1000, ge=1, le=1_000_000)
    max_id_chars: int = Field(default=512, ge=1, le=65_536)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=1 << 31)
    # Slow or idle clients (service.slow_clients): seconds from a request's first byte (or the connection) to the
    # end of its headers, and from there to the end of its body (0: no deadline); open connections one client
    # address may hold (0: no cap; behind a reverse proxy all clients share its address).
    header_timeout: float = Field(default=10.0, ge=0, le=3600)
    body_timeout: float = Field(default=60.0, ge=0, le=3600)
    max_connections_per_client: int = Field(default=128, ge=0, le=1_000_000)

    # Overload: at most max_concurrency searches run; up to max_queue more wait up to queue_timeout
    # seconds (then 503); beyond that requests are turned away at once with 429. Admitted searches wait
    # in the micro-batcher (service.batching) and only `threads` of them compute at once, so admitting
    # more makes batches larger, not work more parallel: a flat scan of 100k vectors cost 3.4 ms of CPU
    # for one query, 0.57 ms a query in a batch of 8 and 0.31 ms in a batch of 32.
    max_concurrency: int = Field(default=32, ge=1, le=10_000)
    max_queue: int = Field(default=64, ge=0, le=100_000)
    queue_timeout: float = Field(default=5.0, gt=0, le=600)
    max_pending_writes: int = Field(default=32, ge=1, le=100_000)

    # Index snapshots: written after this many writes, or this many seconds after the first unsaved write.
    snapshot_every_writes: int = Field(default=1000, ge=1)
    snapshot_interval: float = Field(default=60.0, gt=0)
    # A failed snapshot is retried after min(1 s, snapshot_interval), doubling up to this many seconds.
    snapshot_retry_max: float = Field(default=300.0, gt=0)
    # When more than this share of the index's rows are dead (replaced or deleted documents), the index
    # is rebuilt without them: at load, and online in the background when snapshots are due.
    compact_dead_fraction: float = Field(default=0.3, gt=0, le=1)

    # Filters, facets (service.fields): a filter's size (clauses, values of `terms` in all, nesting depth), facets
    # per request and values per facet; a filtered query matching at most filter_exact_docs documents, or at most
    # filter_exact_fraction of them, is ranked by an exact scan of those, else by the index with them as a selector.
    max_filter_clauses: int = Field(default=64, ge=1, le=10_000)
    max_filter_terms: int = Field(default=1024, ge=1, le=1_000_000)
    max_filter_depth: int = Field(default=8, ge=1, le=64)
    max_facets: int = Field(default=8, ge=1, le=256)
    facet_size: int = Field(default=10, ge=1, le=10_000)
    filter_exact_docs: int = Field(default=2_000, ge=0, le=1 << 31)
    filter_exact_fraction: float = Field(default=0.01, ge=0, le=1)
    # A corpus file that changed since it seeded the document store: merge what only the corpus
    # changed (new ids, documents never written through the API), or refuse to start.
    corpus_change: Literal["merge", "refuse"] = "merge"

    # The traffic log (service.events): what each answer showed and the clicks reported on it, the click
    # log the trainer learns from. events_text: what is kept of query and page texts (plain; hash: a salted
    # hash that groups equal texts; none). events_explore: the share of first-page answers whose first
    # events_explore_depth results are shuffled, so position bias can be measured (0: none). Bounds: by age
    # and by the file's size (the oldest impressions go first).
    events: bool = True
    events_text: Literal["plain", "hash", "none"] = "plain"
    events_explore: float = Field(default=0.0, ge=0, le=1)
    events_explore_depth: int = Field(default=10, ge=2, le=1000)
    # Seeds the service's own draws (the explore shuffle above; the team-draft coin of an interleaving comparison),
    # so a simulation that sends the same requests in the same order gets the same log (benchmarks/click_loop*.py);
    # None, the default: drawn from the operating system, as a live service wants.
    random_seed: int | None = None
    events_max_age_days: float = Field(default=30.0, gt=0, le=36_500)
    events_max_mb: float = Field(default=512.0, ge=1, le=1 << 30)

    embed_batch: int = Field(default=2048, ge=1, le=1 << 20)
    # Worker processes that featurize an index build's batches beside the main one (service.featurize_pool);
    # 0: all in one process. A build of fewer than 20,000 documents never starts them.
    build_workers: int = Field(default_factory=lambda: default_threads() - 1, ge=0, le=64)
    snippet_chars: int = Field(default=240, ge=20, le=10_000)
    # A snippet looks for at most snippet_words query words in the first snippet_scan_chars
    # characters of each hit, so its cost per hit is bounded whatever the query and the document.
    snippet_words: int = Field(default=32, ge=1, le=1024)
    snippet_scan_chars: int = Field(default=8192, ge=100, le=1_000_000)
    # ...and at most snippet_scan_budget characters over all the hits of one request (a batch of
    # 64 × 100 hits gets about 150 characters each), so a request's snippets cost ~30 ms at most.
    snippet_scan_budget: int = Field(default=1_000_000, ge=1000, le=100_000_000)

    @field_validator("collection")
    @classmethod
    def _collection_name(cls, value: str) -> str:
        if not COLLECTION_NAME.match(value):
            raise ValueError("collection names are lower-case letters, digits, '-' and '_', starting with a letter")
        return value

    @field_validator("collections")
    @classmethod
    def _collection_names(cls, value: dict[str, CollectionSpec]) -> dict[str, CollectionSpec]:
        for name in value:
            if not COLLECTION_NAME.match(name):
                raise ValueError(f"collection name {name!r}: use lower-case letters, digits, '-' and '_'")
        return value

    @field_validator("api_key", "read_key", "admin_key")
    @classmethod
    def _api_key(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None
        secret = value.get_secret_value()
        name = f"SSI_{(info.field_name or 'api_key').upper()}"
        if len(secret) < MIN_API_KEY_CHARS:
            raise ValueError(f"{name} must be at least {MIN_API_KEY_CHARS} characters (got {len(secret)})")
        if secret != secret.strip():
            raise ValueError(f"{name} must not start or end with whitespace")
        return value

    @field_validator("read_keys", mode="before")
    @classmethod
    def _read_keys(cls, value: object) -> object:
        return key_filters(value, "SSI_READ_KEYS")

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts(cls, value: object) -> object:
        """SSI_ALLOWED_HOSTS is a comma-separated list; patterns as Starlette's TrustedHostMiddleware reads them."""
        hosts = [h.strip() for h in value.split(",")] if isinstance(value, str) else value
        if not isinstance(hosts, list):
            return hosts
        hosts = [h for h in hosts if h]
        for host in hosts:
            if "*" in host[1:] or (host.startswith("*") and host != "*" and not host.startswith("*.")):
                raise ValueError(f"allowed host {host!r}: a wildcard is only allowed as '*.example.com' or '*'")
        return hosts

    @model_validator(mode="after")
    def _safe(self) -> Settings:
        if self.insecure_writes and self.api_key is None and not is_loopback(self.host):
            raise ValueError(
                f"refusing unauthenticated writes on {self.host}: set SSI_API_KEY, "
                "or bind to 127.0.0.1 to use SSI_INSECURE_WRITES"
            )
        if self.collection in self.collections:
            raise ValueError(f"collection {self.collection!r} is defined twice (SSI_BUNDLE and SSI_COLLECTIONS)")
        if self.read_keys_file is not None:
            self.read_keys = [*self.read_keys, *_keys_file(self.read_keys_file)]
            self.read_keys_file = None  # read once: a copy of these settings does not read it again
        self._check_read_keys()
        self._read_schema()
        return self

    def _read_schema(self) -> None:
        """The default collection's declared field types, from the schema file (SSI_SCHEMA, --schema)."""
        if self.schema_file is None:
            self._schema = {}
            return
        if self.bundle is None:
            raise ValueError(
                "SSI_SCHEMA (--schema) declares the default collection's field types, and there is none: set "
                'SSI_BUNDLE (a collection of SSI_COLLECTIONS declares its own, "fields": {"sku": "keyword"})'
            )
        try:
            self._schema = read_schema(self.schema_file)
        except FieldError as exc:
            raise ValueError(f"SSI_SCHEMA (--schema): {exc}") from None

    def _check_read_keys(self) -> None:
        """Each filtered read key long enough, distinct from every other key, and its filter of a filter's form."""
        others = {k.get_secret_value() for k in (self.api_key, self.read_key, self.admin_key) if k is not None}
        seen: set[str] = set()
        for i, entry in enumerate(self.read_keys):
            secret = entry.key.get_secret_value()
            name = f"SSI_READ_KEYS key #{i + 1}"
            if len(secret) < MIN_API_KEY_CHARS:
                raise ValueError(f"{name} must be at least {MIN_API_KEY_CHARS} characters (got {len(secret)})")
            if secret != secret.strip():
                raise ValueError(f"{name} must not start or end with whitespace")
            if secret in seen or secret in others:
                raise ValueError(f"{name} is given twice (in SSI_READ_KEYS, its file, or as another key)")
            seen.add(secret)
            check_filter_form(entry.filter, f"{name}: filter")

    @property
    def reads_need_key(self) -> bool:
        """With SSI_READ_KEY or any filtered read key set, every read route but /healthz and /readyz needs a key."""
        return self.read_key is not None or bool(self.read_keys)

    @property
    def store_dir(self) -> Path:
        return (self.data_dir or self.cache_dir) / "stores"

    @property
    def index_dir(self) -> Path:
        return self.cache_dir / "index"

    @property
    def writes_enabled(self) -> bool:
        return self.api_key is not None or self.insecure_writes

    @property
    def reloads_enabled(self) -> bool:
        """Reloads need SSI_ADMIN_KEY, or SSI_API_KEY when no admin key is set."""
        return self.admin_key is not None or self.writes_enabled

    def collection_specs(self) -> dict[str, CollectionSpec]:
        """Every hosted collection by name; the default one first. Raises ValueError when there is none."""
        specs: dict[str, CollectionSpec] = {}
        if self.bundle is not None:
            specs[self.collection] = CollectionSpec(bundle=self.bundle, corpus=self.corpus, fields=self._schema)
        elif self.corpus is not None:
            raise ValueError("SSI_CORPUS is set but SSI_BUNDLE is not: a collection needs a model bundle")
        specs.update(self.collections)
        if not specs:
            raise ValueError("nothing to serve: set SSI_BUNDLE (or pass --bundle DIR)")
        return specs

    def sized_for_this_machine(self) -> Settings:
        """`ssi serve`'s worker processes and threads: what the flags and SSI_WORKERS / SSI_THREADS say, the
        rest chosen from the cores this process may use (service.cores.serve_sizes). Settings made in a process
        that serves alone (tests, benchmarks in process) keep one worker."""
        given = self.model_fields_set
        workers, threads = serve_sizes(
            usable_cores().usable,
            self.workers if "workers" in given else None,
            self.threads if "threads" in given else None,
        )
        return self.model_copy(update={"workers": workers, "threads": threads})

    def allowed_bundle_roots(self) -> list[Path]:
        if self.bundle_root is not None:
            return [self.bundle_root.resolve()]
        roots = {spec.bundle.resolve().parent for spec in self.collection_specs().values()}
        return sorted(roots)
