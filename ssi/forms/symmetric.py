"""SSI symmetric (paper 001, section 3, "UᵀU + I"): f(q, d) = (U q)·(U d) + q·d, one table for both sides.

Half the parameters of the low-rank form; suits tasks where queries and documents are alike
(document–document links).
"""

from __future__ import annotations

from typing import ClassVar

from ssi.forms.base import ArraySpec
from ssi.forms.lowrank import LowRank


class Symmetric(LowRank):
    name: ClassVar[str] = "symmetric"
    description: ClassVar[str] = "(Uq)·(Ud) + q·d"
    paper: ClassVar[str] = "SSI (paper 001), section 3"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (ArraySpec("U", ("N", "D"), "word embeddings of both sides"),)
    document_array: ClassVar[str] = "U"
    word_array: ClassVar[str | None] = "U"
