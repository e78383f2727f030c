"""Whether compiled numba kernels are kept on disk: only where NUMBA_CACHE_DIR names a folder for them.

numba compiles a kernel in every process that first calls it: several seconds of a server's start on a small
machine (service.topk, service.quantized, service.lexical, again in each worker of a group), and of a training
run (training.loss, training.models.spmm). Where NUMBA_CACHE_DIR is set, the kernels decorated with
`cache=CACHE` are cached there and a later process loads them instead; what they compute is the same. Unset,
nothing is written: numba's default cache goes beside the sources, and an install may be read-only.

Only a kernel that calls no compiled function of another module may take `cache=CACHE`: numba checks a cached
kernel against its own source file alone, so one that inlined another file's function would outlive an edit of
that function (training.models.hashkernel's kernels, which inline ssi.forms.hashkernel.window_offset, do not).
"""

from __future__ import annotations

import os

CACHE = bool(os.environ.get("NUMBA_CACHE_DIR"))
