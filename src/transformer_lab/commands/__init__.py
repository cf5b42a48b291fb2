"""The commands: `python train.py` (train: its one-line errors) and `python -m transformer_lab COMMAND` (cli, and
one module per command)."""
