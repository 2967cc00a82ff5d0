"""`python -m memcli`: the same as the `memcli` command."""

from memcli.cli.app import main

main()
