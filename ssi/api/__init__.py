"""The Python API: the three jobs of the `ssi` command, one import and a few lines each.

- `ssi.api.train`: `train(corpus, pairs, kind=..., out=...)` runs what `ssi train` runs and returns the bundle.
- `ssi.api.model`: `load(bundle, corpus=...)` ranks in this process by the form's reference score (no PyTorch).
- `ssi.api.client`: `Client(url, api_key=...)` talks to a running service over HTTP (no FastAPI, no FAISS).

Why a subpackage of `ssi` and not `ssi` itself: `ssi` is the contract between the two halves and imports
neither; this subpackage sits on top of both. It imports nothing here, so that `import ssi.api.client`
never pulls in the trainer, and only the root's lazy door (`ssi.__getattr__`) and `ssi_cli` may import it
(import contracts in pyproject.toml). Users type `import ssi` and reach these names as `ssi.train`,
`ssi.load` and `ssi.Client`.
"""
