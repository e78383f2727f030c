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

import numpy as np
import torch

from ssi.forms import Form
from ssi.forms.psi3 import PSI3 as PSI3Form
from training.models.base import ModelShape
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
        self.V3 = torch.randn(shape.n_words, shape.n_dims, generator=gen).mul_(shape.init_scale)
        self.Y3 = torch.zeros(shape.n_words, shape.n_dims)
        self.opt_V3 = RowAdagrad(self.V3, shape.lr)
        self.opt_Y3 = RowAdagrad(self.Y3, shape.lr)
        self.doc_reached = torch.zeros(shape.n_words, dtype=torch.bool)  # rows of V₃ some update reached
        self._A: torch.Tensor | None = None
        self._B: torch.Tensor | None = None
        self._P: torch.Tensor | None = None

    def scores(self, block: Block) -> np.ndarray:
        self._EQ = torch.sparse.mm(block.queries.forward, self.U)
        self._ED = torch.sparse.mm(block.docs.forward, self.V)
        self._A = torch.sparse.mm(block.docs.forward, self.V3)
        self._B = torch.sparse.mm(block.docs.forward, self.Y3)
        self._P = self._ED + self._A * self._B
        S = (self._EQ @ self._P.T).numpy()
        if block.gram is not None:
            S += block.gram
        return S

    def update(self, block: Block, coeff: np.ndarray) -> None:
        assert self._EQ is not None and self._P is not None and self._A is not None and self._B is not None
        C = torch.from_numpy(coeff)
        G = C.T @ self._EQ
        grad_U = torch.sparse.mm(block.queries.backward, C @ self._P)
        grad_V = torch.sparse.mm(block.docs.backward, G)
        grad_V3 = torch.sparse.mm(block.docs.backward, G * self._B)
        grad_Y3 = torch.sparse.mm(block.docs.backward, G * self._A)
        query_rows, doc_rows = block.queries.touched_words, block.docs.touched_words
        self.opt_U.step(grad_U, query_rows)
        assert self.opt_V is not None
        self.opt_V.step(grad_V, doc_rows)
        self.opt_V3.step(grad_V3, doc_rows)
        self.opt_Y3.step(grad_Y3, doc_rows)
        self.reached[torch.from_numpy(query_rows.astype(np.int64))] = True
        self.doc_reached[torch.from_numpy(doc_rows.astype(np.int64))] = True
        self._EQ = self._ED = self._A = self._B = self._P = None

    def export(self) -> Form:
        # Unreached rows of U and V₃ hold only their random start (see LowRank.export): zero them.
        return self.form(
            {
                "U": self._expand((self.U * self.reached[:, None]).numpy()),
                "V": self._expand(self.V.numpy()),
                "V3": self._expand((self.V3 * self.doc_reached[:, None]).numpy()),
                "Y3": self._expand(self.Y3.numpy()),
            }
        )
