"""`python -m memcli`: the same as the `memcli` command."""

from memcli.cli.entry import main

main()
