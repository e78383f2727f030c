"""`ssi train --corpus C --encoder DIR` with nothing to learn from: BM25 + a pre-trained sentence encoder.

The bundle's form is the diagonal form with every weight 1, whose score is exactly the lexical part (BM25 on
the default vocabulary), and its sentence part weighs λ = 1 (training.hybrid says why). It trains nothing;
the vocabulary is built on the corpus as `ssi train` builds it, so a later `ssi train --clicks … --encoder`
on the same corpus starts from the same words.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ssi.corpus import read_corpus
from ssi.forms.diagonal import Diagonal
from ssi.vocab import Vocabulary
from training.data import file_fingerprint
from training.export import export_bundle
from training.hybrid import DAY_ONE_RULE, DAY_ONE_WEIGHT, PreparedEncoder
from training.settings import TrainSettings


def train_day_one(settings: TrainSettings, prepared: PreparedEncoder, started: float) -> dict[str, Any]:
    """Write the day-one hybrid bundle at settings.out; the summary `ssi train` prints."""
    from training.run import lexical_choice

    docs = read_corpus(settings.corpus)
    vocab = Vocabulary.build(
        [d.full_text for d in docs],
        max_words=settings.vocab_size,
        min_df=settings.min_df,
        bm25=lexical_choice(settings),
        stemmer=settings.stemmer,
    )
    form = Diagonal({"w": np.ones(vocab.size, dtype=np.float32)})
    prepared.cut([d.full_text for d in docs], settings.sentence_dims)
    folder = prepared.weighted(DAY_ONE_WEIGHT, DAY_ONE_RULE)
    manifest = export_bundle(
        settings.out,
        vocab=vocab,
        form=form,
        training={"config": settings.model_dump(mode="json"), "steps": 0, "day_one": True},
        data={"fingerprint": {"corpus": file_fingerprint(settings.corpus)}, "n_docs": len(docs), "task": "none"},
        metrics={},
        sentence=folder,
    )
    return {
        "bundle": str(settings.out),
        "content_hash": manifest.content_hash,
        "form": manifest.form,
        "D": vocab.size,
        "sentence": {
            "name": prepared.spec.name,
            "dims": prepared.spec.dims,
            "weight": DAY_ONE_WEIGHT,
            **({"query_graph": prepared.spec.query.name} if prepared.spec.query is not None else {}),
            **({"projection": prepared.spec.projection.model_dump()} if prepared.spec.projection is not None else {}),
        },
        "seconds": {"total": round(time.perf_counter() - started, 1)},
        "notes": [
            f"no pairs: {vocab.lexical.upper()} + {prepared.spec.name} at λ = {DAY_ONE_WEIGHT:g} "
            "(train with pairs or clicks and --encoder to learn λ with U and V)"
        ],
    }
