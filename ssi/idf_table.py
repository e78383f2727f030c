"""The `term<TAB>idf` file of a bundle: the vocabulary's words (vocab.tsv) and the hashed features (cfh_features.tsv).

One writer and one reader, so both files round-trip the same way (idf written with repr, exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def write_idf_table(path: Path, terms: Sequence[str], idf: np.ndarray) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for term, value in zip(terms, np.asarray(idf).tolist(), strict=True):
            handle.write(f"{term}\t{value!r}\n")


def read_idf_table(path: Path) -> tuple[list[str], np.ndarray]:
    """(terms, float32 idf); a `ValueError` names the first line that is not `term<TAB>idf`."""
    terms: list[str] = []
    idf: list[float] = []
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            term, sep, value = line.rstrip("\n").partition("\t")
            try:
                if not sep or not term:
                    raise ValueError
                idf.append(float(value))
            except ValueError:
                raise ValueError(f"{path}:{number}: expected 'term<TAB>idf'") from None
            terms.append(term)
    return terms, np.asarray(idf, dtype=np.float32)
