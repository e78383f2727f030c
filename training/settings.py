"""The trainer's one configuration object, fed by `ssi train` flags and `SSI_TRAIN_*` variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ssi.bundle import is_bundle
from ssi.sentence import SPEC_FILE
from ssi.stemming import NO_STEMMER, check_stemmer
from ssi.weighting import DEFAULT_B, DEFAULT_K1
from training.device import check_device
from training.kinds import check_kind


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
    clicks: Path | None = None  # a click log (training.clicks): adverts are the corpus, pages the queries
    valid_clicks: Path | None = None
    pages: Path | None = None
    clicked_position: int | None = Field(None, ge=1)
    # Position bias of --clicks (training.debias): None = pbm, or top where --clicked-position is given.
    debias: Literal["pbm", "ips", "naive", "top"] | None = None
    propensity_clip: float = Field(20.0, ge=1.0)  # ips: each click's 1/p(position) is cut here (variance)
    relevance_floor: float = Field(0.5, ge=0.0, lt=1.0)  # pbm: a pair weighs its examined-click rate beyond this
    self_pairs: Literal["title", "split"] | None = None  # no labels: pairs cut from the corpus (training.self_pairs)
    self_pair_words: int = Field(30, ge=1)
    self_pair_unshared: bool = False  # the query keeps only the words its document lacks (training.self_pairs)
    # Where validation asks a held-out document's pseudo-query: among the held-out documents, or among every document
    # (the training ones too, which a model trained on them pulls up: the stricter question).
    self_pair_valid_among: Literal["held-out", "all"] = "held-out"
    # Streamed pairs (training.pair_stream): --pairs read through a shuffle buffer of this many pairs, never whole.
    stream_pairs: bool = False
    shuffle_buffer: int = Field(100_000, ge=4)
    # Data-parallel training on Ray Train (training.ray_train): a cluster address (local, auto, host:port) and
    # the CPU workers, each streaming its share of the pairs; gradients are averaged every step. Implies streaming.
    ray: str | None = None
    # A pre-trained sentence encoder's folder (training.hybrid): a hybrid bundle, f + λ e(q)·e(d); and the epochs of
    # its own training on the pairs first (training.encoder_finetune; 0: the encoder as it is).
    encoder: Path | None = None
    finetune_encoder: int = Field(0, ge=0)
    # Which of its graphs the bundle serves (ssi.sentence): fp32, or int8 (checked against it at export); a server can
    # ask for the other (SSI_ENCODER_PRECISION). None: int8 where its graph passed its check against fp32 (else fp32),
    # or an --encoder bundle's own choice.
    encoder_precision: Literal["fp32", "int8"] | None = None
    # A model folder distilled towards the --encoder (training.shallow_encoder): its graph encodes each query, while
    # documents keep the encoder's vectors (training.sentence_export.add_query_graph).
    query_model: Path | None = None
    # The --encoder's vectors cut to this many dimensions (training.sentence_projection); None: its own.
    sentence_dims: int | None = Field(None, ge=2)
    workers: int = Field(2, ge=1)

    # Model
    kind: Annotated[str, AfterValidator(check_kind)] = "lowrank"  # training.kinds
    # The lexical part's weighting (ssi.weighting): BM25 (queries by idf, documents by saturated term frequency,
    # so q·d ranks as BM25) or the papers' unit tf-idf (q·d = tf-idf cosine); k1 and b are BM25's. None: chosen
    # for the kind (training.run.lexical_choice).
    lexical: Literal["tfidf", "bm25"] | None = None
    bm25_k1: float = Field(DEFAULT_K1, gt=0.0)
    bm25_b: float = Field(DEFAULT_B, ge=0.0, le=1.0)
    # The Snowball stemmer the vocabulary's words go through (ssi.stemming; "none": the words as they are).
    # None: English, but for correlated hashing and two-language vocabularies (training.run.resolve_lexical).
    stemmer: Annotated[str, AfterValidator(check_stemmer)] | None = None
    n_dims: int = Field(100, ge=1, le=4096)
    # None: by the lexical part (training.run.resolve_lexical): tf-idf keeps the 30,000 most frequent words seen
    # in 2 documents or more; BM25 keeps every word (its rarest words are its strongest matches), with the
    # semantic part on the 30,000 most frequent (--frequent-words).
    vocab_size: int | None = Field(None, ge=10)
    # Two languages (--queries in another language than the corpus): the queries' own top words join the
    # vocabulary (ssi.vocab.Vocabulary.interleaved); 0 = one vocabulary built on the corpus.
    query_vocab_size: int = Field(0, ge=0)
    min_df: int | None = Field(None, ge=1)
    frequent_words: int | None = Field(None, ge=1)
    init_scale: float = Field(0.1, ge=0.0)
    # --kind lowrank: train this many models from seeds seed, seed + 1, ... and export the best rank-N model of
    # their average (training.ensemble): less of one seed's luck in a model trained on few pairs.
    ensemble: int = Field(1, ge=1, le=16)
    init_from: Path | None = None
    warm_lr_scale: float = Field(0.1, ge=0.0)
    hash_size: int = Field(1 << 20, ge=1)  # H of --kind hashkernel
    gamma: float = Field(1.0, ge=0.0)  # γ of --kind halftrans: weight of the functional regularizer (paper 004, eq. 6)
    # --kind cfh (correlated feature hashing, ssi.feature_hashing): top-k frequent words per rare feature,
    # which n-grams are hashed, and the documents a 2-gram must appear in; F is --frequent-words
    cfh_top_k: int = Field(5, ge=1)
    cfh_ngrams: Literal["1", "2", "1,2"] = "1,2"
    cfh_min_df: int = Field(2, ge=1)
    # Linear projections (--kind lsa, cl-lsa, opca, s2net; paper 003, section 4): the projection alone, or
    # combined with the tf-idf cosine at a weight tuned on validation; S2Net's scale γ of score differences.
    combine_tfidf: bool = True
    s2net_gamma: float = Field(10.0, gt=0.0)
    # EM kinds (--kind plsa, bltm, bltm-pr, bltm-1v, translation; paper 003, section 3): K topics is --dims.
    em_iterations: int = Field(20, ge=1)
    pair_words: int | None = Field(None, ge=1)  # each side of a training pair cut to its top words (tf-idf)
    lm_lambda: float | None = Field(None, ge=0.0, le=1.0)  # λ of eq. 16; None: tuned on the validation pairs
    translations: int = Field(50, ge=1)  # --kind translation: translations kept per source word

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
    # --self-pairs: stop when validation has not beaten step 0 after this many validations and this many minutes
    # (both), and export the step-0 model (training.trainer); 0 validations: never.
    base_patience: int = Field(5, ge=0)
    base_patience_minutes: float = Field(2.0, ge=0.0)
    seed: int = 0
    threads: int = Field(2, ge=1)
    # Where a gradient-trained kind takes its steps (training.device): auto = a GPU when PyTorch sees one.
    device: Annotated[str, AfterValidator(check_device)] = "auto"

    @model_validator(mode="after")
    def _one_source(self) -> TrainSettings:
        sources = sum(source is not None for source in (self.pairs, self.queries, self.clicks, self.self_pairs))
        mixed = sources == 2 and self.clicks is not None and self.queries is not None  # clicks beside qrels
        day_one = sources == 0 and self.encoder is not None  # BM25 + a sentence encoder, nothing to learn
        if sources != 1 and not mixed and not day_one:
            raise ValueError(
                "give one of --pairs (document-document), --queries with --qrels (BEIR), --clicks, --self-pairs "
                "(or only --encoder: BM25 + a sentence encoder) "
                "(--clicks may go with --queries/--qrels)"
            )
        if self.clicks is None and (
            self.valid_clicks
            or self.pages
            or self.clicked_position
            or self.debias
            # Told apart by value, not by being set: settings passed on whole (a Ray worker's) set every field.
            or self.propensity_clip != type(self).model_fields["propensity_clip"].default
            or self.relevance_floor != type(self).model_fields["relevance_floor"].default
        ):
            raise ValueError(
                "--valid-clicks, --pages, --clicked-position, --debias, --propensity-clip and --relevance-floor "
                "go with --clicks"
            )
        if self.clicks is not None:
            if self.clicked_position is not None and self.debias not in (None, "top"):
                raise ValueError(
                    "--clicked-position keeps the clicks of one position (--debias top): "
                    f"not with --debias {self.debias}"
                )
            if self.debias is None:
                self.debias = "top" if self.clicked_position is not None else "pbm"
            if self.debias == "top" and self.clicked_position is None:
                self.clicked_position = 1
        if self.self_pairs is None and (self.self_pair_unshared or self.self_pair_valid_among != "held-out"):
            raise ValueError("--self-pair-unshared and --self-pair-valid-among shape --self-pairs: give it")
        if self.queries is not None and self.qrels is None:
            raise ValueError("--queries needs --qrels")
        if self.query_vocab_size and self.queries is None:
            raise ValueError("--query-vocab-size gives the queries' language its own words: it needs --queries")
        if self.query_words is not None and self.pairs is None:
            raise ValueError("--query-words cuts query documents to keywords: it needs --pairs")
        if self.kind == "cfh" and (self.frequent_words is None or self.query_words is not None):
            raise ValueError("--kind cfh hashes onto the top --frequent-words words: give it (and no --query-words)")
        if self.ray is not None:
            self.stream_pairs = True
        if self.stream_pairs and self.pairs is None:
            raise ValueError("--stream-pairs and --ray stream a --pairs file (document-document pairs)")
        if self.lexical == "bm25" and (self.kind == "cfh" or self.query_vocab_size):
            raise ValueError(
                "--lexical bm25 does not go with --kind cfh or --query-vocab-size (both are built on tf-idf rows)"
            )
        if self.stemmer not in (None, NO_STEMMER) and (self.kind == "cfh" or self.query_vocab_size):
            raise ValueError(
                f"--stemmer {self.stemmer} does not go with --kind cfh or --query-vocab-size "
                "(correlated hashing reads the words themselves; one stemmer cannot serve two languages): "
                "give --stemmer none"
            )
        if self.lexical == "tfidf" and (self.bm25_k1 != DEFAULT_K1 or self.bm25_b != DEFAULT_B):
            raise ValueError("--bm25-k1 and --bm25-b set the BM25 weighting: they do not go with --lexical tfidf")
        if self.ensemble > 1 and (self.kind != "lowrank" or self.ray is not None):
            raise ValueError("--ensemble folds low-rank models trained in this process: --kind lowrank, without --ray")
        if self.encoder is not None:
            self._check_encoder()
        elif self.finetune_encoder:
            raise ValueError("--finetune-encoder trains the --encoder: give it")
        elif self.encoder_precision is not None:
            raise ValueError("--encoder-precision chooses the --encoder's graph: give it")
        elif self.query_model is not None:
            raise ValueError("--query-model encodes queries beside an --encoder: give it")
        elif self.sentence_dims is not None:
            raise ValueError("--sentence-dims cuts the --encoder's vectors: give it")
        if self.epochs is None and self.max_minutes is None:
            self.max_minutes = 10.0
            # A default, not the user's: the click recipe replaces it with a number of epochs
            # (training.run.resolve_recipe), and tells the two apart by the fields set.
            self.__pydantic_fields_set__.discard("max_minutes")
        return self

    def _check_encoder(self) -> None:
        """What --encoder trains with so far: the low-rank kinds on the host's step, one model, pairs in memory."""
        if self.kind not in ("lowrank", "symmetric", "noidentity"):
            raise ValueError(
                f"--encoder trains its weight with --kind lowrank, symmetric or noidentity, not {self.kind}"
            )
        clashes = {
            "--ensemble": self.ensemble > 1,
            "--ray": self.ray is not None,
            "--stream-pairs": self.stream_pairs,
            "--query-words": self.query_words is not None,
            "--self-pairs": self.self_pairs is not None,
            "--unseen-docs": bool(self.unseen_docs),
        }
        given = [flag for flag, on in clashes.items() if on]
        if given:
            raise ValueError(f"--encoder does not go with {', '.join(given)} yet")
        if self.finetune_encoder and self.query_model is not None:
            raise ValueError(
                "--query-model was distilled towards the --encoder as it is, and --finetune-encoder changes it: "
                "give one of them"
            )
        if self.finetune_encoder and is_bundle(self.encoder):
            raise ValueError(
                f"--finetune-encoder trains the model's weights, and --encoder {self.encoder} is a bundle, which holds "
                "only its encoder's graph: give the sentence-transformers model folder"
            )
        if self.finetune_encoder and (self.encoder / SPEC_FILE).is_file():
            raise ValueError(
                f"--finetune-encoder trains the model's weights, and --encoder {self.encoder} is an encoder folder, "
                "which holds only a graph: give the sentence-transformers model folder"
            )
