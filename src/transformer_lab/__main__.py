"""python -m transformer_lab COMMAND [RUN ...] [key=value ...]: the commands on runs (commands/cli.py)."""

from transformer_lab.commands.cli import main

main()
