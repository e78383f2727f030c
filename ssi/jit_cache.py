"""Whether numba kernels are cached on disk: only where the operator names a folder for the cache (NUMBA_CACHE_DIR).

Here, in the contract package, because every half compiles kernels: the service (service.topk, .lexical, .quantized,
.int8_gemm), the forms (ssi.forms) and the trainer (training.models, .loss, .fitted, .dice). A server process spends
most of its start compiling its kernels (about 5 s of CPU a worker on a 2-core machine, more than loading a
400-document index), and does it again at every restart and in every worker process; every `ssi train` compiles the
trainer's again (each round of `ssi learn` trains in a new process). numba's
own cache (`cache=True`) keeps the compiled code between processes, but by default it writes beside the source,
which a read-only install (the service image) cannot do: so the cache is used only when NUMBA_CACHE_DIR names a
writable folder, which numba then uses for every cached kernel. numba invalidates an entry when its source file
changes.
"""

from __future__ import annotations

import os

CACHE: bool = bool(os.environ.get("NUMBA_CACHE_DIR"))
