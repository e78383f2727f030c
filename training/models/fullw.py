"""Full-matrix SSI, the "margin ranking perceptron": f(q, d) = qᵀ(W + I)d, W a D × D matrix.

Only for small vocabularies (D² parameters). W starts at 0, so training starts from tf-idf.
∂loss/∂W = Xqᵀ C Xd. Exported as the `fullw` form (ssi.forms.fullw).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ssi.forms.fullw import MAX_VOCAB
from ssi.forms.fullw import FullW as FullWForm
from training.models.base import ModelShape, SSIModel
from training.models.block import Block
from training.models.optim import RowAdagrad


class FullW(SSIModel):
    kind: ClassVar[str] = "fullw"
    description: ClassVar[str] = f"qᵀ(W + I)d with a full D × D matrix (D ≤ {MAX_VOCAB})"

    def __init__(self, shape: ModelShape) -> None:
        if shape.vocab_size > MAX_VOCAB:
            raise ValueError(
                f"the full-W model needs a small vocabulary: D = {shape.vocab_size} > {MAX_VOCAB}; "
                "pass --vocab-size or pick a low-rank kind"
            )
        super().__init__(shape)
        self.W = torch.zeros(shape.vocab_size, shape.vocab_size)
        self.opt = RowAdagrad(self.W, shape.lr)
        self._QW: torch.Tensor | None = None

    def scores(self, block: Block) -> np.ndarray:
        self._QW = torch.sparse.mm(block.queries.forward, self.W)  # B × D: rows qᵀW
        S = torch.sparse.mm(block.docs.forward, self._QW.T.contiguous()).T.contiguous().numpy()
        if block.gram is not None:
            S += block.gram
        return S

    def update(self, block: Block, coeff: np.ndarray) -> None:
        C = torch.from_numpy(np.ascontiguousarray(coeff.T))  # P × B
        c_xd = torch.sparse.mm(block.docs.backward, C).T.contiguous()  # B × D: C Xd
        grad = torch.sparse.mm(block.queries.backward, c_xd)  # D × D: Xqᵀ C Xd
        self.opt.step(grad, block.queries.touched_words)

    def export(self) -> FullWForm:
        return FullWForm({"W": self.W.numpy().copy()})
