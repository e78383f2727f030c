"""The `ssi` command's entry package: it sits on top of both halves so the contract package `ssi` stays a leaf.

`ssi_cli.main` dispatches each subcommand to the half that owns it, so `ssi serve` loads only the
service (no PyTorch, no training code) and `ssi train` only the trainer.
"""
