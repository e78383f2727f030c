"""Low-rank SSI (Bai et al., "Supervised Semantic Indexing", CIKM 2009), in its three variants.

    lowrank      f(q, d) = qᵀ(UᵀV + I)d = (U q)·(V d) + q·d     U ≠ V: queries and documents differ
    symmetric    f(q, d) = (U q)·(U d) + q·d                   one table for both sides
    noidentity   f(q, d) = (U q)·(V d)                         no shared diagonal (cross-language)

Gradients of the block scores S = (Xq U)(Xd V)ᵀ: with C = ∂loss/∂S, ∂/∂(Xq U) = C (Xd V) and
∂/∂(Xd V) = Cᵀ(Xq U), then ∂/∂U = Xqᵀ[C (Xd V)] and ∂/∂V = Xdᵀ[Cᵀ(Xq U)], sparse × dense products
that only reach the rows of words present in the block.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ssi.forms import Form
from ssi.forms.lowrank import LowRank as LowRankForm
from ssi.forms.noidentity import NoIdentity as NoIdentityForm
from ssi.forms.symmetric import Symmetric as SymmetricForm
from training.models.base import ModelShape, SSIModel, host
from training.models.block import Block, union_rows
from training.models.optim import RowAdagrad
from training.models.spmm import coefficient_products


class LowRank(SSIModel):
    kind: ClassVar[str] = "lowrank"
    description: ClassVar[str] = "(Uq)·(Vd) + q·d, the default"
    lexical_scale: ClassVar[float] = 1.0
    form: ClassVar[type[Form]] = LowRankForm
    runs_on_device: ClassVar[bool] = True

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        gen = torch.Generator().manual_seed(shape.seed)  # drawn on the CPU: the same start on every device
        self.U = torch.randn(shape.n_words, shape.n_dims, generator=gen).mul_(shape.init_scale).to(shape.device)
        self.V = self._make_v(gen)
        self.opt_U = RowAdagrad(self.U, shape.lr)
        self.opt_V = RowAdagrad(self.V, shape.lr) if self.V is not self.U else None
        self._EQ: torch.Tensor | None = None
        self._ED: torch.Tensor | None = None
        self.reached = torch.zeros(shape.n_words, dtype=torch.bool, device=shape.device)  # rows some update reached

    def warm_start(self, init: Form, lr_scale: float = 1.0) -> None:
        """Start from a trained low-rank SSI's U and V (e.g. PSI-3 from its degree-2 model).

        Their Adagrad accumulators start empty, so at the full rate the first steps are as large as
        at the very start of training and knock the trained model off its optimum; `lr_scale` < 1
        keeps them small (0 freezes U and V).
        """
        if not isinstance(init, LowRankForm) or init.name != "lowrank" or self.V is self.U:
            raise ValueError(f"a '{self.kind}' model warm-starts from a 'lowrank' bundle, got '{init.name}'")
        if init.n_dims != self.shape.n_dims:
            raise ValueError(f"the warm-start bundle has N = {init.n_dims}, this model N = {self.shape.n_dims}")
        self.U.copy_(torch.from_numpy(self._restrict(init.values["U"])))
        self.V.copy_(torch.from_numpy(self._restrict(init.values["V"])))  # copy_ moves them to the device
        self.reached |= self.U.ne(0).any(dim=1)
        self.opt_U.lr *= lr_scale
        if self.opt_V is not None:
            self.opt_V.lr *= lr_scale

    def _make_v(self, gen: torch.Generator) -> torch.Tensor:
        # V starts at zero and U at small random values: the first score is exactly tf-idf (no
        # noise to unlearn) while ∂/∂V = Xdᵀ Cᵀ(Xq U) is already non-zero.
        return torch.zeros(self.shape.n_words, self.shape.n_dims, device=self.shape.device)

    def scores(self, block: Block) -> torch.Tensor:
        self._EQ = block.queries.times(self.U)
        self._ED = block.docs.times(self.V)
        S = self._EQ @ self._ED.T
        if self.lexical_scale and block.gram is not None:
            S += self.lexical_scale * block.gram
        return S

    def update(self, block: Block, coeff: torch.Tensor) -> None:
        assert self._EQ is not None and self._ED is not None, "scores() must come first"
        of_queries, of_docs = coefficient_products(coeff, self._ED, self._EQ)
        grad_U = block.queries.t_times(of_queries)
        grad_V = block.docs.t_times(of_docs)
        if self.opt_V is None:  # symmetric: one table gets both sides' gradients
            grad_U += grad_V
            self.opt_U.step(grad_U, union_rows(block.queries.update_rows, block.docs.update_rows))
            block.docs.mark(self.reached)
        else:
            self.opt_U.step(grad_U, block.queries.update_rows)
            self.opt_V.step(grad_V, block.docs.update_rows)
        block.queries.mark(self.reached)
        self._EQ = self._ED = None

    def export(self) -> Form:
        # A row of U that no training query ever reached holds only its random start: exported, it
        # would add noise to every query using that word. Such rows are exported as zero (V's
        # untouched rows are zero already: V starts at zero).
        U = self._expand(host(self.U * self.reached[:, None]))
        if self.V is self.U:
            return self.form({"U": U})
        return self.form({"U": U, "V": self._expand(host(self.V))})


class Symmetric(LowRank):
    kind: ClassVar[str] = "symmetric"
    description: ClassVar[str] = "(Uq)·(Ud) + q·d"
    form: ClassVar[type[Form]] = SymmetricForm

    def _make_v(self, gen: torch.Generator) -> torch.Tensor:
        return self.U


class NoIdentity(LowRank):
    kind: ClassVar[str] = "noidentity"
    description: ClassVar[str] = "(Uq)·(Vd), no diagonal term (cross-language)"
    lexical_scale: ClassVar[float] = 0.0
    needs_gram: ClassVar[bool] = False
    form: ClassVar[type[Form]] = NoIdentityForm
