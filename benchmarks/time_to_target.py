"""Time to a target loss: whole `python train.py experiment=PRESET` processes that stop at the first validation
whose val/loss is at or below the target (Lightning's EarlyStopping with stopping_threshold), for recipes given as
override sets, interleaved.

    python benchmarks/time_to_target.py [--preset shakespeare_char_cpu] [--target 1.91] [--rounds 3]
        [--out outputs/time_to_target] [--recipe NAME="OVERRIDES" ...]

Default recipes: `nanogpt` (the preset on nanoGPT's recipe, AdamW for 2,000 steps: NANOGPT_RECIPE) and `preset`
(the preset as it is: Muon and QK-norm for 500 steps). Round i runs every recipe once, in
an order rotated by one each round (A B, B A, ...), so a machine that drifts within the sitting weighs on all.
Each process is timed from its start to its exit. Prints every run's wall time, the step it stopped at and its
best val/loss (a run that never reaches the target ends at the preset's trainer.max_steps and is marked so), then
each recipe's median and its ratio to the first recipe's. The runs are kept under --out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from preset_vs_loop import NANOGPT_RECIPE  # noqa: E402  (nanoGPT's recipe: the preset's before issue #45)


def stop_at(target: float) -> list[str]:
    return [
        "+callbacks.target._target_=lightning.pytorch.callbacks.EarlyStopping",
        "+callbacks.target.monitor=val/loss",
        "+callbacks.target.mode=min",
        f"+callbacks.target.stopping_threshold={target}",
        "+callbacks.target.patience=1000000",
        "+callbacks.target.check_on_train_epoch_end=false",
    ]


def run(preset: str, overrides: list[str], target: float, run_dir: Path) -> dict:
    command = [sys.executable, "train.py", f"experiment={preset}", "logger=none", *overrides, *stop_at(target)]
    command.append(f"hydra.run.dir={run_dir}")
    log = run_dir.with_suffix(".log")
    start = time.perf_counter()
    with open(log, "w") as f:
        if subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
            sys.exit(
                f"error: {shlex.join(command[1:])} failed: {log.read_text().strip().splitlines()[-1]} (log: {log})"
            )
    seconds = time.perf_counter() - start
    summary = json.loads((run_dir / "summary.json").read_text())
    best = summary["val/loss_best"]
    return {"seconds": seconds, "step": summary["global_step"], "val_loss_best": best, "reached": best <= target}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="shakespeare_char_cpu", help="experiment=PRESET (default: %(default)s)")
    parser.add_argument("--target", type=float, default=1.91, help="the val/loss to reach (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each recipe, interleaved (default: %(default)s)")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "outputs" / "time_to_target",
        help="a new folder for the runs (default: %(default)s)",
    )
    parser.add_argument(
        "--recipe",
        action="append",
        default=[],
        help='NAME="OVERRIDES" (repeatable; default: nanogpt="NANOGPT_RECIPE" and preset="")',
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    recipes = {"nanogpt": NANOGPT_RECIPE, "preset": []}
    if args.recipe:
        recipes = {}
        for given in args.recipe:
            name, sep, overrides = given.partition("=")
            if not sep or not name:
                parser.error(f'--recipe takes NAME="OVERRIDES", got {given!r}')
            recipes[name] = shlex.split(overrides)
    if args.out.exists():
        parser.error(f"--out {args.out} exists: give a new folder (its runs are never overwritten)")
    try:
        args.out.mkdir(parents=True)
    except OSError as e:
        parser.error(f"--out {args.out}: cannot make it ({e.strerror})")
    names = list(recipes)
    results = {name: [] for name in names}
    for i in range(args.rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            result = run(args.preset, recipes[name], args.target, args.out / f"{name}-{i}")
            results[name].append(result)
            # after every run, so a later recipe's failure keeps what the earlier ones measured
            (args.out / "results.json").write_text(json.dumps({"target": args.target, "runs": results}, indent=1))
            mark = "" if result["reached"] else f"  (never <= {args.target})"
            print(
                f"round {i} {name:>12}: {result['seconds']:7.1f} s, step {result['step']:>5}, "
                f"best val/loss {result['val_loss_best']:.4f}{mark}",
                flush=True,
            )
    baseline = results[names[0]]
    first = statistics.median(r["seconds"] for r in baseline) if all(r["reached"] for r in baseline) else None
    print(f"\nmedian whole-process seconds to val/loss <= {args.target} ({args.preset}, {args.rounds} rounds):")
    for name in names:
        steps = sorted({r["step"] for r in results[name]})
        missed = sum(not r["reached"] for r in results[name])
        if missed:  # a time to a target not reached is no time to it
            print(f"  {name:>12}: not reached in {missed} of {args.rounds} rounds (ended at steps {steps})")
            continue
        median = statistics.median(r["seconds"] for r in results[name])
        ratio = f"{median / first:.3f}x {names[0]}" if first else f"{names[0]} did not reach it"
        print(f"  {name:>12}: {median:7.1f} s  ({ratio}), stopped at steps {steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
