"""transformer-lab: small transformers composed as data x model x hardware with Hydra + Lightning.

    import transformer_lab
    run = transformer_lab.load("outputs/DATE/TIME")         # a trained run: model, encode/decode, verbs, metrics
    run = transformer_lab.train("experiment=shakespeare_char_cpu")   # python train.py ..., in this process
    table = transformer_lab.runs("multirun/DATE/TIME", group_by="optim.lr")   # compare's table, a DataFrame

(docs/python.md). The names are imported on first use, so `import transformer_lab` stays cheap for the commands.
"""

__version__ = "0.1.0"
__all__ = ["load", "runs", "train", "Run", "UserError"]


def __getattr__(name: str):
    if name in ("load", "Run"):
        from transformer_lab.api import run

        return getattr(run, name)
    if name == "train":
        from transformer_lab.commands.train import in_this_process

        return in_this_process
    if name == "UserError":  # (what every mistake raises: its one line)
        from transformer_lab.errors import UserError

        return UserError
    if name == "runs":
        from transformer_lab.api.runs import runs

        return runs
    raise AttributeError(f"module 'transformer_lab' has no attribute {name!r}")
