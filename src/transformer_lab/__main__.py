"""python -m transformer_lab COMMAND [RUN ...] [key=value ...]: the commands on runs (cli.py)."""

from transformer_lab.cli import main

main()
