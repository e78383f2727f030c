"""The trainer's one configuration object, fed by `ssi train` flags and `SSI_TRAIN_*` variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class TrainSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SSI_TRAIN_", extra="forbid")

    # Data
    corpus: Path
    out: Path
    pairs: Path | None = None
    valid_pairs: Path | None = None
    queries: Path | None = None
    qrels: Path | None = None
    valid_qrels: Path | None = None
    valid_share: float = Field(0.1, ge=0.0, lt=1.0)
    query_words: int | None = Field(None, ge=1)
    unseen_docs: float = Field(0.0, ge=0.0, lt=1.0)

    # Model
    kind: str = "lowrank"
    n_dims: int = Field(100, ge=1, le=4096)
    vocab_size: int = Field(30000, ge=10)
    min_df: int = Field(2, ge=1)
    frequent_words: int | None = Field(None, ge=1)
    init_scale: float = Field(0.1, ge=0.0)
    init_from: Path | None = None
    warm_lr_scale: float = Field(0.1, ge=0.0)

    # Optimisation
    lr: float = Field(0.03, gt=0.0)
    margin: float = Field(1.0, gt=0.0)
    batch_queries: int = Field(512, ge=1)
    positives_per_query: int = Field(16, ge=1)
    negatives_per_positive: int = Field(2, ge=1)
    pool_size: int = Field(20000, ge=16)
    hard_fraction: float = Field(0.5, ge=0.0, le=1.0)
    hard_pool: int = Field(50, ge=1)
    max_gram_entries: int = Field(100_000_000, ge=0)

    # Budget and selection
    epochs: float | None = Field(None, gt=0)
    max_minutes: float | None = Field(None, gt=0)
    eval_every: int = Field(50, ge=1)
    patience: int = Field(0, ge=0)
    seed: int = 0
    threads: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> TrainSettings:
        if (self.pairs is None) == (self.queries is None):
            raise ValueError("give either --pairs (document-document) or --queries with --qrels (BEIR)")
        if self.queries is not None and self.qrels is None:
            raise ValueError("--queries needs --qrels")
        if self.query_words is not None and self.pairs is None:
            raise ValueError("--query-words cuts query documents to keywords: it needs --pairs")
        if self.epochs is None and self.max_minutes is None:
            self.max_minutes = 10.0
        return self
