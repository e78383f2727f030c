"""Whether the service's compiled kernels (service.topk, service.quantized, service.lexical) are kept on disk.

numba compiles them in every process that loads a collection, before it serves (several seconds of a start on
a small machine, and again in each worker of a group). Where NUMBA_CACHE_DIR names a folder, they are cached
there (numba's `cache=True`) and a later start loads them instead; the kernels and what they compute are the
same. Unset, nothing is written: numba's default cache goes beside the sources, and an install may be read-only.
"""

from __future__ import annotations

import os

CACHE = bool(os.environ.get("NUMBA_CACHE_DIR"))
