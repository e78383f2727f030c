"""Supervised half-transductive ranking (Bai et al., "Half Transductive Ranking", AISTATS 2010; paper 004, §2.3).

The score is eq. (2), f(x, y_i) = v_iᵀ W φ(x): a free vector v_i per training document, the functional
map W for queries. Training minimizes eq. (6) over triples (x, y⁺, y⁻):

    γ Σ R(k(x, y⁺), k(x, y⁻)) + Σ R(v₊ᵀWφ(x), v₋ᵀWφ(x))      R(z, z') = max(0, 1 − z + z'),
                                                              k(x, y) = φ(y)ᵀWᵀWφ(x)

The second term is the trainer's margin loss on the block S = (Xq W)(v_pool)ᵀ (`scores`); the first,
the γ-weighted regularizer that also embeds documents functionally, is taken here on K = (Xq W)(Xd W)ᵀ
with the same triples (`Block.triples`). With C = ∂/∂S and C_γ = γ ∂/∂K (E_Q = Xq W, E_D = Xd W):

    ∂/∂v_pool = Cᵀ E_Q       ∂/∂W = Xqᵀ(C v_pool + C_γ E_D) + Xdᵀ(C_γᵀ E_Q)

which are the section 2.3 updates, summed over the block; as the other kinds here, steps are Adagrad
per row (training/models/optim.py) rather than the paper's fixed rate λ, and only the rows of v a step
reaches are read and written (the paper's point: "only accesses W and two rows of v").

Calibration (ours; the paper ranks a fixed set, where it cannot arise): the loss is unchanged when every
free vector moves by the same δ (each query's free-vector scores move by δ·Wφ(x) together), so nothing
ties the free vectors' scores to the functional ones, and documents ranked by W φ(y) beside training
documents were, on Wikispeedia, almost all on top. So the free vectors are kept centred on the
functional embeddings of their documents: a free vector is v_i = u_i + δ with the learned u_i and
δ = mean_j (W φ(y_j) − u_j) over the documents that have one (a running sum of u and of φ(y) keeps
it cheap). δ changes no triple's loss between free vectors, so the gradients are those of eq. (6);
the ranking among training documents is what it would be, and a document added later is scored by
W φ(y) on the same footing.

Initialisation: the paper draws v at random (section 2.1). Here a document's free vector starts as its
functional embedding W φ(y) the first time a triple reaches it, and a document no triple reached keeps
scoring by W φ(y): such a document is exported without a free vector, so the model the trainer scores
and the exported form (ssi.forms.halftrans) agree on every document.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ssi.forms import DocumentKeys, Form
from ssi.forms.halftrans import HalfTransductive as HalfTransductiveForm
from training.loss import margin_ranking
from training.models.base import ModelShape, SSIModel
from training.models.block import Block
from training.models.optim import RowAdagrad


class HalfTransductive(SSIModel):
    kind: ClassVar[str] = "halftrans"
    description: ClassVar[str] = "v_d·(Wq): a free vector per training document, W d for new ones (--gamma)"
    needs_gram: ClassVar[bool] = False
    per_document: ClassVar[bool] = True

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        if shape.documents is None:
            raise ValueError("a 'halftrans' model needs its training documents' ids (ModelShape.documents)")
        self.documents = shape.documents
        gen = torch.Generator().manual_seed(shape.seed)
        self.W = torch.randn(shape.n_words, shape.n_dims, generator=gen).mul_(shape.init_scale)  # rows: words
        self.v = torch.zeros(len(shape.documents), shape.n_dims)
        self.opt_W = RowAdagrad(self.W, shape.lr)
        self.opt_v = RowAdagrad(self.v, shape.lr)
        self.reached = torch.zeros(shape.n_words, dtype=torch.bool)  # rows of W some update reached
        self.has_vector = np.zeros(len(shape.documents), dtype=bool)  # documents some triple reached
        self.text_sum = np.zeros(shape.n_words, dtype=np.float64)  # Σ φ(y_i) over them (for δ)
        self.u_sum = torch.zeros(shape.n_dims, dtype=torch.float64)  # Σ u_i over them (v holds u)
        self._delta: torch.Tensor | None = None
        self._EQ: torch.Tensor | None = None
        self._ED: torch.Tensor | None = None
        self._VP: torch.Tensor | None = None

    def scores(self, block: Block) -> torch.Tensor:
        if block.doc_rows is None:
            raise ValueError("a 'halftrans' model needs the block's document rows")
        self._EQ = block.queries.times(self.W)  # W φ(x)
        self._ED = block.docs.times(self.W)  # W φ(y): the functional embedding
        rows = torch.from_numpy(block.doc_rows.astype(np.int64))
        free = torch.from_numpy(self.has_vector[block.doc_rows])
        self._delta = self.offset()
        self._VP = torch.where(free[:, None], self.v.index_select(0, rows) + self._delta, self._ED)
        return self._EQ @ self._VP.T

    def update(self, block: Block, coeff: torch.Tensor) -> None:
        assert self._EQ is not None and self._ED is not None and self._VP is not None, "scores() must come first"
        assert block.doc_rows is not None and self._delta is not None
        EQ, ED = self._EQ, self._ED
        C = coeff
        grad_EQ = C @ self._VP
        grad_vp = C.T @ EQ
        grad_W = None
        triples = block.triples
        if self.shape.gamma > 0 and triples is not None:
            K = EQ @ ED.T
            _, coeff_k, _ = margin_ranking(K, triples.query, triples.pos, triples.neg, triples.valid, triples.margin)
            C_k = coeff_k.mul_(self.shape.gamma)
            grad_EQ += C_k @ ED
            grad_W = block.docs.t_times(C_k.T @ EQ)
        from_queries = block.queries.t_times(grad_EQ)
        grad_W = from_queries if grad_W is None else grad_W.add_(from_queries)
        both = np.union1d(block.queries.touched_words, block.docs.touched_words)
        self.opt_W.step(grad_W, both if triples is not None and self.shape.gamma > 0 else block.queries.touched_words)
        # Document words took part in the scores (W φ(y)) even where no gradient reached them (γ = 0).
        self.reached[torch.from_numpy(both.astype(np.int64))] = True
        moved = grad_vp.ne(0).any(dim=1).numpy()
        pool = np.flatnonzero(moved)
        doc_rows = block.doc_rows[pool]
        new = ~self.has_vector[doc_rows]
        if new.any():  # a free vector starts where its document's functional embedding is now: u = W φ(y) − δ
            index = torch.from_numpy(doc_rows[new].astype(np.int64))
            start = ED.index_select(0, torch.from_numpy(pool[new].astype(np.int64))) - self._delta
            self.v.index_copy_(0, index, start)
            self.u_sum += start.sum(dim=0, dtype=torch.float64)
            self.has_vector[doc_rows[new]] = True
            rows = block.docs.full[pool[new]][:, : self.shape.n_words]
            self.text_sum += np.asarray(rows.sum(axis=0), dtype=np.float64).ravel()
        index = torch.from_numpy(doc_rows.astype(np.int64))
        before = self.v.index_select(0, index)
        self.opt_v.step_rows(grad_vp.index_select(0, torch.from_numpy(pool.astype(np.int64))), doc_rows)
        self.u_sum += (self.v.index_select(0, index) - before).sum(dim=0, dtype=torch.float64)
        self._EQ = self._ED = self._VP = self._delta = None

    def offset(self) -> torch.Tensor:
        """δ = mean_i (W φ(y_i) − u_i) over the documents with a free vector (zero before any)."""
        count = int(self.has_vector.sum())
        if count == 0:
            return torch.zeros(self.shape.n_dims)
        mean_text = torch.from_numpy((self.text_sum / count).astype(np.float32))
        return mean_text @ self.W - (self.u_sum / count).float()

    def export(self) -> Form:
        # Untouched rows of W hold their random start only: exported as zero (as lowrank's U).
        W = self._expand((self.W * self.reached[:, None]).numpy())
        rows = np.flatnonzero(self.has_vector)
        keys = DocumentKeys(
            tuple(self.documents.ids[i] for i in rows), tuple(self.documents.fingerprints[i] for i in rows)
        )
        v = np.ascontiguousarray((self.v.numpy()[rows] + self.offset().numpy()), dtype=np.float32)
        return HalfTransductiveForm({"W": W, "v": v}, keys)
