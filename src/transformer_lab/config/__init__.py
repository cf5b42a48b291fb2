"""The configuration: its schemas (schema), which registers them with Hydra on import, and every check made
before a run writes anything (checks; the command line's own in command_line; Lightning's Trainer in trainer)."""

from transformer_lab.config import schema  # noqa: F401  (registers the schemas, for everything that composes)
