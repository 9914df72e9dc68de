"""Subcommand registry of the CLI: name -> (help, argparse setup, run). One module per concern."""
from analysis.cli.commands import (eval_cmds, export_cmds, heads_cmds, inspect_cmds, plan_cmds, prune_cmds, report_cmds,
                                   sensitivity_cmds, train_cmds)

COMMANDS = {
    **inspect_cmds.COMMANDS,
    **heads_cmds.COMMANDS,
    **prune_cmds.COMMANDS,
    **sensitivity_cmds.COMMANDS,
    **plan_cmds.COMMANDS,
    **train_cmds.COMMANDS,
    **report_cmds.COMMANDS,
    **eval_cmds.COMMANDS,
    **export_cmds.COMMANDS,
}
