"""Carving a validation split out of training judgments, by query, with a fixed seed.

BEIR SciFact has no dev split: the trainer and the evaluator must carve the *same* validation
queries out of the train qrels, so both call `split_by_query`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ssi.records import Pair

DEFAULT_VALID_FRACTION = 0.1
DEFAULT_SPLIT_SEED = 0


def split_by_query(
    pairs: Sequence[Pair], valid_fraction: float = DEFAULT_VALID_FRACTION, seed: int = DEFAULT_SPLIT_SEED
) -> tuple[list[Pair], list[Pair]]:
    """(train pairs, valid pairs): every pair of a query goes to the same side.

    The distinct query ids are sorted, permuted by `numpy.random.default_rng(seed)`, and the first
    round(valid_fraction · n_queries) (at least one, at most n_queries − 1) go to validation, so the
    split depends only on the set of query ids, the fraction and the seed — not on file order.
    """
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    query_ids = sorted({p.query_id for p in pairs})
    if len(query_ids) < 2:
        raise ValueError(f"need at least two queries to split, found {len(query_ids)}")
    n_valid = min(max(1, round(valid_fraction * len(query_ids))), len(query_ids) - 1)
    order = np.random.default_rng(seed).permutation(len(query_ids))
    valid_ids = {query_ids[i] for i in order[:n_valid]}
    train = [p for p in pairs if p.query_id not in valid_ids]
    valid = [p for p in pairs if p.query_id in valid_ids]
    return train, valid


def unseen_documents(doc_ids: Sequence[str], share: float, seed: int = DEFAULT_SPLIT_SEED) -> frozenset[str]:
    """The documents held out of training in the unseen-documents setting (PSI paper, partitioned setup).

    round(share · n) ids (at least one) of the sorted ids, permuted by `default_rng(seed)`: like the
    validation split, it depends only on the set of ids, the share and the seed, so `ssi train` and
    `ssi eval` hold out the same documents.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"the unseen share must be in (0, 1), got {share}")
    ids = sorted(set(doc_ids))
    n_unseen = min(max(1, round(share * len(ids))), len(ids) - 1)
    order = np.random.default_rng(seed).permutation(len(ids))
    return frozenset(ids[i] for i in order[:n_unseen])
