"""Grokking's progress measures remeasured the paper's way: every snapshot of a run with one set of key frequencies,
those of its final model (Nanda et al. 2023 took the final model's for every checkpoint; the progress callback takes
each moment's own). Reads RUN/snapshots/*.ckpt (a ModelCheckpoint every N steps, as experiments/grokking.md's
command saves them) and writes RUN/progress_fixed.jsonl (one line a snapshot: step, the key frequencies, the
excluded and restricted losses, the training and validation accuracy):

    python benchmarks/grokking_progress.py RUN [RUN ...] [--key-share 0.9] [--out progress_fixed.jsonl] [--plot FILE]

`--plot FILE`: the runs' remeasured losses and validation accuracy against step, and their final spectra.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from transformer_lab.callbacks.grokking import GrokkingProgress, embedding_spectrum, key_frequencies
from transformer_lab.run.build import datamodule_from_checkpoint, load_model


def snapshots(run: Path) -> list[tuple[int, Path]]:
    found = [(int(re.search(r"(\d+)", p.stem).group(1)), p) for p in (run / "snapshots").glob("*.ckpt")]
    return sorted(found)


def remeasure(run: Path, key_share: float, out: str = "progress_fixed.jsonl") -> list[dict]:
    steps = snapshots(run)
    if not steps:
        raise SystemExit(f"error: {run}/snapshots holds no checkpoint")
    final = load_model(run / "checkpoints" / "last.ckpt")
    config = final[1]["config"]["data"]
    datamodule = datamodule_from_checkpoint(final[1])
    datamodule.setup("fit")
    measures = GrokkingProgress(
        "modular", final[1]["config"]["model"]["_target_"], str(run), config["p"], "+", 2, key_share
    )
    measures.prepare(datamodule, final[0])
    residues = measures.embedding.weight[measures.residues].detach()
    measures.frequencies = key_frequencies(embedding_spectrum(residues), key_share)
    rows = []
    for step, path in steps:
        model, _ = load_model(path)
        measures.prepare(datamodule, model)
        m = measures.measure(model)
        with torch.no_grad():
            logits = torch.cat([model(c)[:, -1] for c in measures.inputs.split(4096)])
        predicted = logits[:, measures.residues].argmax(-1)
        right = predicted == measures.answers
        val = torch.ones(len(right), dtype=torch.bool)
        val[measures.train] = False
        rows.append({"step": step, "key": m["key"], "spectrum": m["spectrum"].tolist(), "excluded_loss": m["excluded"], "restricted_loss": m["restricted"],
                     "train_acc": float(right[measures.train].float().mean()), "val_acc": float(right[val].float().mean())})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    (run / out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def plot(runs: dict[str, list[dict]], out: Path) -> None:
    """A panel each for val accuracy, excluded and restricted loss (log scale), and the final spectra."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 3.8))
    for i, (name, rows) in enumerate(runs.items()):
        steps = [r["step"] for r in rows]
        style = {"color": f"C{i}", "label": f"{name}: key {rows[-1]['key']}"}
        axes[0].plot(steps, [r["val_acc"] for r in rows], **style)
        axes[1].plot(steps, [r["excluded_loss"] for r in rows], **style)
        axes[2].plot(steps, [max(r["restricted_loss"], 1e-6) for r in rows], **style)
        spectrum = rows[-1]["spectrum"]
        axes[3].bar([k + 1 + 0.4 * i for k in range(len(spectrum))], spectrum, width=0.4, color=f"C{i}")
    for ax, title in zip(axes, ["val accuracy", "excluded loss (train)", "restricted loss (train)", "final spectrum"]):
        ax.set_title(title)
        ax.set_xlabel("frequency k" if ax is axes[3] else "step")
        ax.grid(alpha=0.3)
    axes[2].set_yscale("log")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(runs))
    fig.tight_layout()
    fig.savefig(out, dpi=100, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--key-share", type=float, default=0.9)
    parser.add_argument("--out", default="progress_fixed.jsonl", help="its name in each run directory")
    parser.add_argument("--plot", type=Path, help="draw the remeasured runs into this PNG")
    args = parser.parse_args()
    runs = {run.name: remeasure(run, args.key_share, args.out) for run in args.runs}
    if args.plot:
        plot(runs, args.plot)


if __name__ == "__main__":
    main()
