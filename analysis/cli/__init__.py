"""`python -m analysis`: the parser and one module per group of subcommands."""
