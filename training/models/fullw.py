"""Full-matrix SSI, the "margin ranking perceptron": f(q, d) = qᵀ(W + I)d, W a D × D matrix.

Only for small vocabularies (D² parameters). W starts at 0, so training starts from tf-idf.
∂loss/∂W = Xqᵀ C Xd. Exported as the `fullw` form (ssi.forms.fullw).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ssi.forms.fullw import MAX_VOCAB
from ssi.forms.fullw import FullW as FullWForm
from training.models.base import ModelShape, SSIModel, host
from training.models.block import Block
from training.models.optim import RowAdagrad


class FullW(SSIModel):
    kind: ClassVar[str] = "fullw"
    runs_on_device: ClassVar[bool] = True
    description: ClassVar[str] = f"qᵀ(W + I)d with a full D × D matrix (D ≤ {MAX_VOCAB})"

    def __init__(self, shape: ModelShape) -> None:
        if shape.vocab_size > MAX_VOCAB:
            raise ValueError(
                f"the full-W model needs a small vocabulary: D = {shape.vocab_size} > {MAX_VOCAB}; "
                "pass --vocab-size or pick a low-rank kind"
            )
        super().__init__(shape)
        self.W = torch.zeros(shape.vocab_size, shape.vocab_size, device=shape.device)
        self.opt = RowAdagrad(self.W, shape.lr)
        self._QW: torch.Tensor | None = None

    def scores(self, block: Block) -> torch.Tensor:
        self._QW = block.queries.times(self.W)  # B × D: rows qᵀW
        S = block.docs.times(self._QW.T.contiguous()).T.contiguous()
        if block.gram is not None:
            S += block.gram
        return S

    def update(self, block: Block, coeff: torch.Tensor) -> None:
        C = coeff.T.contiguous()  # P × B
        c_xd = block.docs.t_times(C).T.contiguous()  # B × D: C Xd
        grad = block.queries.t_times(c_xd)  # D × D: Xqᵀ C Xd
        self.opt.step(grad, block.queries.update_rows)

    def export(self) -> FullWForm:
        return FullWForm({"W": host(self.W).copy()})
