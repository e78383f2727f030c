"""SSI diagonal: f(q, d) = Σ_i w_i q_i d_i, a learned re-weighting of the words (Bai et al., 2009).

∂f/∂w_i = q_i d_i, so for block coefficients C, ∂loss/∂w = Σ_b q_b ∘ (C Xd)_b. Weights start at 1
(tf-idf cosine) and are kept ≥ 0: a word match never counts against a document, which also keeps
the service's candidate bound exact.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch

from ssi.forms.diagonal import Diagonal as DiagonalForm
from training.models.base import ModelShape, SSIModel
from training.models.block import Block, to_torch_csr
from training.models.optim import RowAdagrad


class Diagonal(SSIModel):
    kind: ClassVar[str] = "diagonal"
    description: ClassVar[str] = "Σ w_i q_i d_i, learned word weights"
    needs_gram: ClassVar[bool] = False
    reads_lexical_rows: ClassVar[bool] = True

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        self.w = torch.ones(shape.vocab_size, 1)
        self.opt = RowAdagrad(self.w, shape.lr)

    def scores(self, block: Block) -> torch.Tensor:
        weighted = sp.csr_matrix(block.queries.full.multiply(self.w.numpy()[:, 0][None, :]))
        docs = to_torch_csr(block.docs.full)
        return torch.sparse.mm(docs, torch.from_numpy(weighted.T.toarray())).T.contiguous()

    def update(self, block: Block, coeff: torch.Tensor) -> None:
        docs_t = to_torch_csr(block.docs.full.T.tocsr())
        c_xd = torch.sparse.mm(docs_t, coeff.T.contiguous()).numpy()  # D × B
        grad = np.asarray(block.queries.full.T.multiply(c_xd).sum(axis=1), dtype=np.float32)
        self.opt.step(torch.from_numpy(grad), np.unique(block.queries.full.indices))
        self.w.clamp_(min=0.0)

    def export(self) -> DiagonalForm:
        return DiagonalForm({"w": self.w.numpy()[:, 0].copy()})
