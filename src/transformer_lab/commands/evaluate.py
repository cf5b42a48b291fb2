"""Evaluate a trained model on its run's data, without training: loss and perplexity, accuracy, exact match, BLEU.

    python -m transformer_lab evaluate RUN_DIR_OR_CKPT [split=val|test] [out=FILE] [weights=trained] \\
        [predictions=FILE [overwrite=true]] [overrides ...]

    python -m transformer_lab evaluate outputs/DATE/TIME split=test task.decode.beam_size=8
    python -m transformer_lab evaluate outputs/DATE/TIME/checkpoints/last.ckpt trainer.limit_val_batches=50
    python -m transformer_lab evaluate outputs/DATE/TIME data.path=my_text.txt

A run directory means its checkpoints/best.ckpt (last.ckpt where there is no best). The config is the
checkpoint's run's (its overrides, as resume uses them) with these overrides on top: decoding
(`task.decode.*`), batches (`trainer.limit_val_batches`, default all), hardware (`hardware=gpu`), ... . The
data is read with the checkpoint's vocabulary, so `data.path=FILE` evaluates on a file of yours (a text
file for a model trained on text, a TSV of pairs for translation, a text<TAB>label file for a classifier),
all of it whatever the split (a label the classifier never saw is refused, naming it). The
metrics are printed, and written as JSON to `out=FILE` where one is given (kept if it exists unless
overwrite=true); nothing in the run directory changes (a read never writes there). A run with callbacks=[default,ema] saves the average of the weights, evaluated by
default, and the trained weights beside it: `weights=trained` evaluates those (what the average bought).
`predictions=FILE` writes each example's prediction as a JSON line, in the split's order: {"input": ...,
"prediction": ..., "reference": ..., "exact": true|false} (an equation and the model's answer, a source and its
translation, a text and its class); a file that exists is kept unless overwrite=true.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from transformer_lab.choices import check_choice, check_flag
from transformer_lab.commands.cli import Command, run_command
from transformer_lab.config.schema import CONF
from transformer_lab.errors import UserError
from transformer_lab.store.atomic import check_destination

USAGE = __doc__.split("\n\n")[1]


def evaluate(
    target: str,
    split: str = "val",
    overrides: list[str] = (),
    out: str | None = None,
    weights: str = "saved",
    predictions: str | None = None,
    overwrite: bool = False,
) -> dict:
    """The metrics of the checkpoint `target` (a run directory or a .ckpt file) on `split`; `weights="trained"`:
    of the trained weights an EMA checkpoint keeps beside the average (its `current_model_state`).
    `predictions`: a file for each example's record (metrics.py `predicts`), one JSON line each; one that exists
    is refused unless `overwrite`."""
    check_choice("split", split, ("val", "test"))
    if weights not in ("saved", "trained"):
        raise UserError(f"weights must be trained (or left out: the checkpoint's own), got {weights!r}")
    check_flag("overwrite", overwrite)
    check_output_file("out", out, "eval.json's contents go there", overwrite)
    check_output_file("predictions", predictions, "a JSON line an example goes there", overwrite)
    if out and predictions and Path(out).absolute() == Path(predictions).absolute():
        raise UserError(f"predictions={predictions}: the same file as out=; give each its own")
    import lightning as L
    from hydra import compose, initialize_config_dir

    import transformer_lab.config.schema  # noqa: F401  (registers the config schemas)
    from transformer_lab.config.checks import validate
    from transformer_lab.config.classes import check_buildable
    from transformer_lab.config.compatibility import as_trained, changed_leaves, check_compatible, check_state_fits
    from transformer_lab.config.trainer import trainer_arguments
    from transformer_lab.errors import ConfigError, first_line
    from transformer_lab.run.build import build
    from transformer_lab.run.resume import merge_overrides
    from transformer_lab.store.checkpoint import checkpoint_of, read_checkpoint
    from transformer_lab.store.origins import (
        override,
        recorded_searchpath,
        restore_code,
        root_dir,
        run_overrides,
        with_searchpath,
    )

    path = checkpoint_of(target)
    checkpoint = read_checkpoint(path, mmap=True)  # its settings and shapes; Lightning reads the tensors
    meta = checkpoint["transformer_lab"]
    shapes = {key: tuple(value.shape) for key, value in checkpoint["state_dict"].items()}
    step = checkpoint.get("global_step")
    trained = checkpoint.get("current_model_state") if weights == "trained" else None
    if weights == "trained" and trained is None:
        raise UserError(f"weights=trained: {path} keeps no trained weights apart (only runs with callbacks ema do)")
    del checkpoint
    defaults = [
        "logger=none",
        "ckpt_path=null",
        "optim.pretrained_lr=null",  # (no optimizer: a run started with init_from is evaluated as any other)
        *(["task.sample.enabled=false"] if "sample" in meta["config"]["task"] else []),
        "trainer.limit_val_batches=1.0",
        "trainer.limit_test_batches=null",
        override("paths.data_dir", meta["config"]["paths"]["data_dir"]),
    ]
    fixed = [
        *(root_dir(meta, list(overrides)) or [override("paths.root_dir", Path.cwd())]),
        override("paths.output_dir", path.parent),
    ]
    restore_code(meta, str(path))
    recorded = with_searchpath(run_overrides(meta) or [], list(overrides))
    recorded_searchpath(recorded, str(path))  # (one given here replaces the run's)
    recorded_searchpath(list(overrides), None)
    given = merge_overrides(merge_overrides(recorded, defaults), list(overrides))
    searchpath = [o for o in given if o.split("=", 1)[0].lstrip("+") == "hydra.searchpath"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        try:
            as_recorded = compose("train", overrides=[o for o in recorded if o not in searchpath] + fixed + searchpath)
            cfg = compose("train", overrides=[o for o in given if o not in searchpath] + fixed + searchpath)
        except Exception as e:  # noqa: BLE001  (Hydra's composition errors: a mistyped key or option)
            cause = f": {first_line(e.__cause__)}" if e.__cause__ else ""
            raise UserError(f"{first_line(e)}{cause}") from None
        # The run's own data and settings, as a resume's: what a YAML edited since would change is put back, and
        # only what this command sets differs from the checkpoint's run.
        cfg = as_trained(cfg, meta["config"], changed_leaves(as_recorded, cfg))
        validate(cfg)
        check_compatible(meta["config"], cfg, str(path))
        datamodule = check_buildable(cfg)
        if split == "test" and not datamodule.has_test_split:
            raise ConfigError("split", f"task={cfg.task.name} on data={cfg.data.name} has no test split; use split=val")
        datamodule, model, task = build(cfg, given, checkpoint_meta=meta, datamodule=datamodule)
    check_state_fits(str(path), shapes, meta["config"], cfg, task)
    if predictions is not None:
        if not getattr(task.metric, "predicts", False):
            raise UserError(
                f"predictions={predictions}: task={cfg.task.name} on data={cfg.data.name} scores no example on its "
                "own (its metrics: the loss over all tokens); leave predictions= out"
            )
        task.predictions = []
    trainer = L.Trainer(
        **trainer_arguments(cfg),
        logger=False,
        callbacks=[],
        enable_checkpointing=False,
        default_root_dir=str(path.parent),
    )
    # Lightning's advice to pass the training callbacks (checkpointing, summary) does not apply to evaluation.
    warnings.filterwarnings("ignore", message=r".*callbacks used to create the checkpoint")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    run = trainer.validate if split == "val" else trainer.test
    if trained is not None:
        task.load_state_dict(trained)
    ckpt_path = None if trained is not None else str(path)
    try:
        outcome = run(task, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True, verbose=False)
    except SystemExit:  # Lightning's own exit after a Ctrl-C it caught: the command's (cli.run_command: exit code 130)
        if trainer.interrupted:
            raise KeyboardInterrupt from None
        raise
    if trainer.received_sigterm or trainer.interrupted:  # (Lightning stops at SIGTERM and returns what it has)
        raise SystemExit(143 if trainer.received_sigterm else 130)
    (metrics,) = outcome
    result = {
        "checkpoint": str(path),
        "step": step,
        "split": split,
        "weights": weights,
        "overrides": list(overrides),
        "metrics": {name: float(value) for name, value in sorted(metrics.items()) if name != "step"},
    }
    from transformer_lab.store.atomic import atomic_write

    if predictions is not None:
        with atomic_write(predictions, "w", key="predictions") as f:
            f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in task.predictions)
        result["predictions"] = {"file": str(predictions), "examples": len(task.predictions)}
    if out:
        with atomic_write(out, "w", key="out") as f:
            f.write(json.dumps(result, indent=2) + "\n")
    return result


def check_output_file(key: str, value: str | None, what: str, overwrite: bool) -> None:
    """KEY=FILE (out=, predictions=) names a file that may be written: not a folder, and not one that exists (a
    user's) unless overwrite=true; checked before anything is evaluated."""
    if value is None:
        return
    if value == "" or Path(value).is_dir():
        raise UserError(f"{key}={value}: give a file name ({what})")
    check_destination(value, f"{key}={value}")
    if Path(value).exists() and not overwrite:
        raise UserError(f"{key}={value}: the file exists; give another name, or overwrite=true to replace it")


def evaluated(args: dict):
    if not args.get("ckpt"):
        raise UserError(f"which run? {USAGE.strip()}")
    if any(o.split("=", 1)[0] == "device" for o in args["overrides"]):
        raise UserError(
            "device: evaluate runs as its run trained, on the config's hardware: hardware=cpu or hardware=gpu"
        )
    result = evaluate(
        args["ckpt"],
        args.get("split", "val"),
        args["overrides"],
        args.get("out"),
        args.get("weights", "saved"),
        args.get("predictions"),
        args.get("overwrite", False),
    )
    width = max(len(name) for name in result["metrics"])
    yield f"{result['checkpoint']} (step {result['step']}), split={result['split']}:"
    for name, value in result["metrics"].items():
        yield f"  {name:<{width}}  {value:.4f}"
    if "predictions" in result:
        yield f"{result['predictions']['examples']} predictions written to {result['predictions']['file']}"
    if args.get("out"):
        yield f"written to {args['out']}"


COMMAND = Command(
    "evaluate",
    __doc__,
    {"ckpt": None, "split": "val", "out": None, "weights": "saved", "predictions": None, "overwrite": False},
    evaluated,
    text=("split", "out", "weights", "predictions"),
    overrides=True,
)


def main(argv: list[str] | None = None) -> None:
    run_command("evaluate", argv)


if __name__ == "__main__":
    main()
