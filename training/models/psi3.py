"""PSI degree 3 (Bai et al., Polynomial Semantic Indexing; papers 000 and 002), trained on SSI triples.

    f(q, d) = Σ_l (U q)_l (V₃ d)_l (Y₃ d)_l + (U q)·(V d) + q·d          (ssi.forms.psi3)

The degree-2 part (U, V) warm-starts from a trained low-rank SSI, as the papers do; V₃ starts
small and random and Y₃ at zero, so the first score is exactly the SSI's while ∂/∂Y₃ is already
non-zero. With E = Xq U, D₂ = Xd V, A = Xd V₃, B = Xd Y₃ and the document vector P = D₂ + A∘B,
the block scores are S = E Pᵀ + gram, and for C = ∂loss/∂S, G = Cᵀ E (∂/∂P):

    ∂/∂U = Xqᵀ (C P)    ∂/∂V = Xdᵀ G    ∂/∂V₃ = Xdᵀ (G∘B)    ∂/∂Y₃ = Xdᵀ (G∘A)

sparse × dense products reaching only the rows of words present in the block, as for SSI.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ssi.forms import Form
from ssi.forms.psi3 import PSI3 as PSI3Form
from training.models.base import ModelShape, host
from training.models.block import Block
from training.models.lowrank import LowRank
from training.models.optim import RowAdagrad


class PSI3(LowRank):
    kind: ClassVar[str] = "psi3"
    description: ClassVar[str] = "Σ (Uq)(V₃d)(Y₃d) + (Uq)·(Vd) + q·d, warm-started from a lowrank bundle"
    form: ClassVar[type[Form]] = PSI3Form

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        gen = torch.Generator().manual_seed(shape.seed + 3)
        self.V3 = torch.randn(shape.n_words, shape.n_dims, generator=gen).mul_(shape.init_scale).to(shape.device)
        self.Y3 = torch.zeros(shape.n_words, shape.n_dims, device=shape.device)
        self.opt_V3 = RowAdagrad(self.V3, shape.lr)
        self.opt_Y3 = RowAdagrad(self.Y3, shape.lr)
        # rows of V₃ some update reached
        self.doc_reached = torch.zeros(shape.n_words, dtype=torch.bool, device=shape.device)
        self._A: torch.Tensor | None = None
        self._B: torch.Tensor | None = None
        self._P: torch.Tensor | None = None

    def scores(self, block: Block) -> torch.Tensor:
        self._EQ = block.queries.times(self.U)
        self._ED = block.docs.times(self.V)
        self._A = block.docs.times(self.V3)
        self._B = block.docs.times(self.Y3)
        self._P = self._ED + self._A * self._B
        S = self._EQ @ self._P.T
        if block.gram is not None:
            S += block.gram
        return S

    def update(self, block: Block, coeff: torch.Tensor) -> None:
        assert self._EQ is not None and self._P is not None and self._A is not None and self._B is not None
        C = coeff
        G = C.T @ self._EQ
        grad_U = block.queries.t_times(C @ self._P)
        grad_V = block.docs.t_times(G)
        grad_V3 = block.docs.t_times(G * self._B)
        grad_Y3 = block.docs.t_times(G * self._A)
        query_rows, doc_rows = block.queries.update_rows, block.docs.update_rows
        self.opt_U.step(grad_U, query_rows)
        assert self.opt_V is not None
        self.opt_V.step(grad_V, doc_rows)
        self.opt_V3.step(grad_V3, doc_rows)
        self.opt_Y3.step(grad_Y3, doc_rows)
        block.queries.mark(self.reached)
        block.docs.mark(self.doc_reached)
        self._EQ = self._ED = self._A = self._B = self._P = None

    def export(self) -> Form:
        # Unreached rows of U and V₃ hold only their random start (see LowRank.export): zero them.
        return self.form(
            {
                "U": self._expand(host(self.U * self.reached[:, None])),
                "V": self._expand(host(self.V)),
                "V3": self._expand(host(self.V3 * self.doc_reached[:, None])),
                "Y3": self._expand(host(self.Y3)),
            }
        )
