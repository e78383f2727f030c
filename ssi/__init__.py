"""SSI search: a ranking function learned from pairs, trained, ranked in process, and served.

The three jobs, one import each (details: `help(ssi.train)`, `help(ssi.load)`, `help(ssi.Client)`).
Below, `corpus` is your JSONL corpus (id, title, text), `pairs` your TSV of (query id, document id) pairs,
`folder` where to write, `query` a text to search for, and `url` a running service (`ssi serve`) with
`api_key` its write key.

1. Train a model and write its bundle (the `train` extra: PyTorch); the options are `ssi train`'s:

>>> import ssi
>>> trained = ssi.train(corpus, pairs, kind="lowrank", out=folder / "model", n_dims=8, epochs=2, progress=False)
>>> trained.form
'lowrank'

2. Rank a corpus in this process, exactly, by the model's own score (no PyTorch needed):

>>> model = ssi.load(trained, corpus=corpus)
>>> hits = model.search(query, k=5)
>>> [(type(hit).__name__, type(hit.id).__name__, type(hit.score).__name__) for hit in hits][0]
('Hit', 'str', 'float')
>>> model.score([query], ["the cat runs fast", "a car engine"]).shape
(1, 2)

3. Query a running service; its errors raise `ssi.ServiceError` with the server's status and message:

>>> with ssi.Client(url, api_key=api_key) as client:
...     found = client.search(query, k=5)
...     written = client.put_document("doc-1", title="Jaguar", text="the fastest cat")
>>> len(found.hits), written.ids
(5, ['doc-1'])

The package is also the contract between the two halves: `ssi.tokenize`, `ssi.vocab` and
`ssi.weighting` featurize text the same way in the trainer and the service, `ssi.bundle` is the on-disk
model format the trainer writes and the service verifies, `ssi.forms` defines each model form's score,
`ssi.records` holds the typed records both use and `ssi.corpus` reads the user's files. Those modules
import neither `training` nor `service`.

Why the API is reached lazily: the API (`ssi.api`) sits on top of both halves (`ssi.train` runs the
trainer, `ssi.load` ranks with the evaluation harness's scorer), while the service imports `ssi.bundle`,
which runs this file first. So this file imports nothing of the API until one of its names is used
(PEP 562 `__getattr__`), and only the submodule that name needs: `import ssi.bundle` never imports the
trainer or PyTorch, and `ssi.load` or `ssi.Client` never import PyTorch either. The import contracts in
pyproject.toml state the rule: the contract modules import neither half; only this door and `ssi_cli`
import `ssi.api`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    # ssi.api.train
    "train", "Trained",
    # ssi.api.model
    "load", "Model", "Hit",
    # ssi.api.client
    "Client", "ServiceError", "SearchHit", "SearchResult", "StoredDocument", "WriteResult", "DeleteResult",
    "ClickResult", "Facet",
    "AdFilter", "AdMatch", "PageMatch", "Advert",
    "__version__",
]  # fmt: skip

# Which API module defines each public name (tests/api check that these cover __all__).
_TRAIN = frozenset({"train", "Trained"})
_MODEL = frozenset({"load", "Model", "Hit"})
_CLIENT = frozenset(__all__) - _TRAIN - _MODEL - {"__version__"}

if TYPE_CHECKING:
    from ssi.api.client import (
        AdFilter,
        AdMatch,
        Advert,
        ClickResult,
        Client,
        DeleteResult,
        Facet,
        PageMatch,
        SearchHit,
        SearchResult,
        ServiceError,
        StoredDocument,
        WriteResult,
    )
    from ssi.api.model import Hit, Model, load
    from ssi.api.train import Trained, train


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use (the module docstring says why)."""
    if name in _TRAIN:
        from ssi.api import train as module
    elif name in _MODEL:
        from ssi.api import model as module
    elif name in _CLIENT:
        from ssi.api import client as module
    else:
        raise AttributeError(f"module 'ssi' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
