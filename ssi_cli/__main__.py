"""`python -m ssi_cli`: the `ssi` command, where its console script is not installed (a bare GPU machine)."""

from ssi_cli.main import main

main()
