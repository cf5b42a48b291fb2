"""Does pretraining help? T5 on Multi30k de->en, pretrained by span corruption then fine-tuned, against the
same recipe from scratch: the measurement behind experiments/t5_finetune_de_en.md.

    python benchmarks/pretrain_finetune.py [--seeds 1 2] [--out outputs] [overrides ...]

For each seed, four runs of `train.py` (overrides, e.g. logger=csv, go to each):

1. `experiment=t5_pretrain_multi30k seed=S`: span corruption on both languages' training sentences;
2. `experiment=t5_finetune_de_en seed=S`: every weight from 1, then translation;
3. the same, `init_from=null`: from scratch for as many steps (equal fine-tuning steps);
4. from scratch for the steps whose model FLOPs are those of 1 and 2 together (equal total compute), its
   schedule stretched to them. A run's training FLOPs are flops_per_token x tokens_per_sec x train_time_s
   of its summary (the tokens it trained on times the FLOPs of each: independent of the machine's speed).

A run whose summary.json says `completed` is kept, not run again. Prints a markdown table of test BLEU
(beam 4) and val BLEU (greedy) at the fine-tuning's last step, and writes the val/bleu-vs-step curves of
runs 2 to 4 into one PNG (`--plot`, default experiments/t5_finetune_de_en.png).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VALIDATIONS = 4  # of the fine-tuning preset (600 steps, every 150); the equal-compute run validates as often


def summary(run: Path) -> dict | None:
    path = run / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def train(run: Path, *overrides: str) -> dict:
    done = summary(run)
    if done and done.get("status") == "completed":
        print(f"kept: {run}", flush=True)
        return done
    command = [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={run}"]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return summary(run)


def flops(result: dict) -> float:
    """Model FLOPs of a run's training steps 2 to N (the steps its throughput figures cover)."""
    return result["flops_per_token"] * result["tokens_per_sec"] * result["train_time_s"]


def val_bleu_at(run: Path, step: int) -> float | None:
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("step") == step and "val/bleu" in record:
            return record["val/bleu"]
    return None


def plot(curves: list, path: Path) -> None:
    """val/bleu against step, one line per run: a colour per kind of run, a line style per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"fine-tuned": "tab:blue", "scratch, equal steps": "tab:orange", "scratch, equal compute": "tab:green"}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, seed, run in curves:
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        points = [(r["step"], r["val/bleu"]) for r in records if "val/bleu" in r]
        style = "-" if seed == curves[0][1] else "--"
        ax.plot(*zip(*points), marker="o", color=colours[name], linestyle=style, label=f"{name}, seed {seed}")
    ax.set_xlabel("fine-tuning step (the fine-tuned runs come after 400 steps of pretraining)")
    ax.set_ylabel("val/bleu (greedy, whole validation set)")
    ax.set_title("T5 on Multi30k de-en, 2-core CPU: pretrained vs from scratch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs")
    parser.add_argument("--plot", type=Path, default=ROOT / "experiments" / "t5_finetune_de_en.png")
    args, overrides = parser.parse_known_args()

    rows, curves = [], []
    for seed in args.seeds:
        pretrain_dir = args.out / "t5_pretrain_multi30k" / f"seed{seed}"
        pretrained = train(pretrain_dir, "experiment=t5_pretrain_multi30k", f"seed={seed}", *overrides)
        finetune = ["experiment=t5_finetune_de_en", f"seed={seed}", *overrides]
        runs = {"fine-tuned": args.out / "t5_finetune_de_en" / f"seed{seed}"}
        tuned = train(runs["fine-tuned"], *finetune, f"init_from={pretrain_dir}")
        steps = tuned["global_step"]
        runs["scratch, equal steps"] = args.out / "t5_scratch_de_en" / f"seed{seed}"
        train(runs["scratch, equal steps"], *finetune, "init_from=null")
        # Training FLOPs of steps 2 to N of each (what the summary's figures cover), per fine-tuning step.
        per_step = flops(tuned) / (steps - 1)
        interval = round((flops(pretrained) / per_step + steps) / VALIDATIONS)
        runs["scratch, equal compute"] = args.out / "t5_scratch_equal_compute_de_en" / f"seed{seed}"
        train(
            runs["scratch, equal compute"],
            *finetune,
            "init_from=null",
            f"trainer.max_steps={VALIDATIONS * interval}",
            f"trainer.val_check_interval={interval}",
        )
        for name, run in runs.items():
            result = summary(run)
            rows.append(
                {
                    "run": name,
                    "seed": seed,
                    "steps": result["global_step"],
                    "test/bleu": result["test/bleu"],
                    f"val/bleu at {steps}": val_bleu_at(run, steps),
                    "val/bleu": result["val/bleu"],
                    "PFLOPs": (flops(result) + (flops(pretrained) if name == "fine-tuned" else 0)) / 1e15,
                    "train_time_s": result["train_time_s"]
                    + (pretrained["train_time_s"] if name == "fine-tuned" else 0),
                    "wall_time_s": result["wall_time_s"] + (pretrained["wall_time_s"] if name == "fine-tuned" else 0),
                }
            )
            curves.append((name, seed, run))

    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in rows:
        cells = [f"{v:.2f}" if isinstance(v, float) else "–" if v is None else str(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |")
    for name in dict.fromkeys(r["run"] for r in rows):
        bleus = [r["test/bleu"] for r in rows if r["run"] == name]
        print(f"{name}: test/bleu mean {statistics.mean(bleus):.2f} over seeds {args.seeds}")
    total = sum(row["wall_time_s"] for row in rows)  # (a fine-tuned row's includes its pretraining)
    print(f"whole comparison: {total / 60:.1f} min of wall time, every process")
    plot(curves, args.plot)
    print(f"curves: {args.plot}")


if __name__ == "__main__":
    main()
