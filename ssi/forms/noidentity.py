"""SSI without the identity (paper 001, section 3; PSI paper 000, cross-language retrieval):

    f(q, d) = (U q)·(V d)

No diagonal term: for queries and documents in two languages a shared word means nothing. The
service still gathers lexical candidates, but with w = 0 they add nothing and the index alone ranks.
"""

from __future__ import annotations

from typing import ClassVar

from ssi.forms.lowrank import LowRank


class NoIdentity(LowRank):
    name: ClassVar[str] = "noidentity"
    description: ClassVar[str] = "(Uq)·(Vd), no diagonal term (cross-language)"
    paper: ClassVar[str] = "SSI (paper 001), section 3"
    identity: ClassVar[bool] = False
