"""The forms registry: one module per model form, looked up by the name a bundle's manifest records.

The trainer exports a form, `ssi eval` ranks with its reference score and the service builds its
index from it; see `ssi.forms.base` for what a form declares.
"""

from __future__ import annotations

from ssi.forms.base import ArraySpec, DocumentKeys, DocumentProducts, Form, FormError
from ssi.forms.cfh import CorrelatedHashingForm
from ssi.forms.diagonal import Diagonal
from ssi.forms.fullw import FullW
from ssi.forms.halftrans import HalfTransductive
from ssi.forms.hashkernel import HashKernel
from ssi.forms.lowrank import LowRank
from ssi.forms.noidentity import NoIdentity
from ssi.forms.projection import Projection
from ssi.forms.psi3 import PSI3
from ssi.forms.symmetric import Symmetric
from ssi.forms.topics import TopicModel
from ssi.forms.translation import WordTranslation

FORMS: dict[str, type[Form]] = {
    cls.name: cls for cls in (LowRank, Symmetric, NoIdentity, Diagonal, FullW, PSI3, HashKernel, HalfTransductive)
}
FORMS[CorrelatedHashingForm.name] = CorrelatedHashingForm
FORMS[Projection.name] = Projection
FORMS[TopicModel.name] = TopicModel
FORMS[WordTranslation.name] = WordTranslation


def form_class(name: str) -> type[Form]:
    """The form called `name`; a `FormError` lists the known ones."""
    try:
        return FORMS[name]
    except KeyError:
        raise FormError(f"unknown model form '{name}' (this build knows {', '.join(FORMS)})") from None


__all__ = ["FORMS", "ArraySpec", "DocumentKeys", "DocumentProducts", "Form", "FormError", "form_class"]
