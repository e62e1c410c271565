"""`python -m precis_cli`: the `precis` command without its entry point."""

from precis_cli.cli import main

main()
