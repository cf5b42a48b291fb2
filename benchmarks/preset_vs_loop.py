"""What the framework costs: `python train.py experiment=shakespeare_char_cpu` (the preset, on nanoGPT's recipe:
NANOGPT_RECIPE) against the same recipe as a bare PyTorch loop (benchmarks/plain_loop.py) and as the barest Lightning loop
(benchmarks/lightning_loop.py: Lightning's own cost, nothing of this repo's), whole processes, interleaved.

    python benchmarks/preset_vs_loop.py [--rounds 5] [--out outputs/preset_vs_loop] [--iters 2000] [--no-lightning]
        [PRESET_OVERRIDES ...]

Round i runs the three (two with --no-lightning) back to back, in an order rotated by one each round, so a machine that drifts within
the sitting weighs on all three. Each process is timed from its start to its exit. Prints every round's
times and ratios to the bare loop, their medians, and the final val losses, which must agree (the same
model, batches and optimizer: the same digits; to ~4 decimals under an override such as hardware=cpu_bf16).
The runs' output is kept under --out.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(command: list[str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        if subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
            sys.exit(f"error: {' '.join(command[1:])} failed: {log.read_text().strip().splitlines()[-1]} (log: {log})")
    return time.perf_counter() - start


def loop(out: Path, i: int, iters: int, overrides: list[str]) -> tuple[float, float]:
    log = out / f"loop-{i}.log"
    seconds = timed([sys.executable, "benchmarks/plain_loop.py", f"--iters={iters}"], log)
    return seconds, float(re.search(r"fixed val windows (\S+),", log.read_text())[1])


def lightning(out: Path, i: int, iters: int, overrides: list[str]) -> tuple[float, float]:
    log = out / f"lightning-{i}.log"
    seconds = timed([sys.executable, "benchmarks/lightning_loop.py", f"--iters={iters}"], log)
    return seconds, float(re.findall(r"val loss (\S+)", log.read_text())[-1])


# nanoGPT's CPU recipe, which the loops run: the preset's before it took Muon (issue #45, time_to_target.md)
NANOGPT_RECIPE = [
    "optim.name=adamw",
    "optim.lr=1e-3",
    "optim.warmup_steps=100",
    "optim.decay_steps=2000",
    "trainer.max_steps=2000",
    "model.qk_norm=false",
]


def preset(out: Path, i: int, iters: int, overrides: list[str]) -> tuple[float, float]:
    run_dir = out / f"preset-{i}"
    command = [
        sys.executable,
        "train.py",
        "experiment=shakespeare_char_cpu",
        *NANOGPT_RECIPE,
        f"hydra.run.dir={run_dir}",
    ]
    command += overrides
    if iters != 2000:  # (a shorter run: its schedule decays over its own length, as the loops' do)
        command += [f"trainer.max_steps={iters}", f"optim.decay_steps={iters}"]
    seconds = timed(command, out / f"preset-{i}.log")
    return seconds, json.loads((run_dir / "summary.json").read_text())["val/loss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "preset_vs_loop")
    parser.add_argument("--iters", type=int, default=2000, help="the recipe's steps (2000; fewer: a quick check)")
    parser.add_argument("--no-lightning", action="store_true", help="time the bare loop and the preset only")
    parser.add_argument("overrides", nargs="*", help="train.py overrides for the preset only, e.g. hardware=cpu")
    args = parser.parse_args()
    out = args.out.absolute() / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True)
    contestants = [("loop", loop), ("lightning", lightning), ("preset", preset)]
    if args.no_lightning:
        contestants.pop(1)
    rows = []
    for i in range(args.rounds):
        order = contestants[i % len(contestants) :] + contestants[: i % len(contestants)]
        row = {"round": i + 1, "order": " ".join(name for name, _ in order)}
        for name, run in order:
            print(f"round {i + 1}/{args.rounds}: {name} ...", end=" ", flush=True)
            row[name], row[f"{name}_val_loss"] = run(out, i + 1, args.iters, args.overrides)
            print(f"{row[name]:.1f} s", flush=True)
        for name, _ in contestants[1:]:
            row[f"{name}_ratio"] = row[name] / row["loop"]
        rows.append(row)
    others = [name for name, _ in contestants[1:]]
    print(
        f"\n{'round':>5}  {'order':<22} {'loop s':>7}"
        + "".join(f" {name + ' s':>11}" for name in others)
        + "".join(f"  {name + '/loop':>14}" for name in others)
    )
    for r in rows:
        print(
            f"{r['round']:>5}  {r['order']:<22} {r['loop']:7.2f}"
            + "".join(f" {r[name]:11.2f}" for name in others)
            + "".join(f"  {r[name + '_ratio']:14.3f}" for name in others)
        )
    medians = {f"{name}_ratio": statistics.median(r[f"{name}_ratio"] for r in rows) for name in others}
    print(
        f"median over {len(rows)} rounds: "
        + ", ".join(f"{name}/loop {medians[name + '_ratio']:.3f}" for name in others)
    )
    losses = {" / ".join(f"{r[f'{name}_val_loss']:.4f}" for name, _ in contestants) for r in rows}
    print(f"final val loss, {' / '.join(name for name, _ in contestants)}: {', '.join(losses)}")
    (out / "preset_vs_loop.json").write_text(json.dumps({"rounds": rows, "medians": medians}, indent=1) + "\n")
    print(f"runs and results: {out}")


if __name__ == "__main__":
    main()
