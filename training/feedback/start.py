"""A first bundle for a service with no trained model yet: it ranks exactly as its BM25 base, and can learn.

The low-rank form scores (U q)·(V d) + q·d. With U = 0 the first term is 0 for every pair, so the bundle
ranks exactly as its lexical part, BM25 on stems with the trainer's defaults (the same vocabulary `ssi train`
builds for this corpus). V holds a small random start (the trainer's initialisation, Bai et al. 2009, with
the two sides swapped): a warm start from a bundle whose U and V are both zero would have no gradient
(∂/∂U ∝ V d, ∂/∂V ∝ U q). U, not V, is the side left at zero because the trainer exports as zero the rows
of U that no training query reached: a warm start from this bundle keeps U zero for every query word the
clicks never had, where a random U would add noise to every query with such a word.
No training runs: nothing is learned from any label. With `encoder` (a sentence-transformers folder) the start is
the day-one hybrid instead, BM25 + λ e(q)·e(d) at λ = 1 (training.hybrid), whose rounds keep the encoder.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from training.export import export_bundle
from training.hybrid import DAY_ONE_RULE, DAY_ONE_WEIGHT, PreparedEncoder
from training.run import load_data, resolve_lexical
from training.settings import TrainSettings
from training.trainer import Trainer

DEFAULT_START_DIMS = 64  # the SciFact recipes' N (docs/results/scifact.md)


def write_bm25_start(
    corpus: Path, out: Path, *, dims: int = DEFAULT_START_DIMS, seed: int = 0, encoder: Path | None = None
) -> dict[str, Any]:
    """Write a lowrank bundle equal to its BM25 base (U = 0, V random) for `corpus`, plus the day-one encoder part
    with `encoder`; returns its summary."""
    settings = resolve_lexical(
        TrainSettings(corpus=corpus, out=out, self_pairs="title", n_dims=dims, seed=seed, epochs=1.0)
    )
    data = load_data(settings, None)
    trainer = Trainer(data, settings, docs=data.vocab.doc_matrix(data.X_docs, ids=data.doc_ids))
    model = trainer.model
    model.reached[:] = True  # export the random start of U as it is (export zeroes rows no step reached)
    drawn = model.export()  # U at its random start, V = 0: swapped, U = 0 and V random
    form = type(drawn)({"U": drawn.values["V"], "V": drawn.values["U"]})
    note = "ssi learn's BM25 start: U = 0, so f(q, d) = q·d (BM25); V at a random start"
    with PreparedEncoder(encoder, settings.threads) if encoder is not None else nullcontext() as prepared:
        manifest = export_bundle(
            out,
            vocab=data.vocab,
            form=form,
            training={"config": settings.model_dump(mode="json"), "steps": 0, "note": note},
            data={"n_docs": len(data.docs), "task": "bm25-start"},
            metrics={},
            sentence=prepared.weighted(DAY_ONE_WEIGHT, DAY_ONE_RULE) if prepared is not None else None,
        )
    return {"bundle": str(out), "content_hash": manifest.content_hash, "D": data.vocab.size, "N": dims}
