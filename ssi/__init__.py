"""The contract shared by the offline trainer and the online service.

`ssi.text` featurizes text the same way in both halves, `ssi.bundle` is the on-disk model format
the trainer writes and the service verifies, `ssi.records` holds the typed records both use and
`ssi.corpus` reads the user's files.
"""

__version__ = "0.1.0"
