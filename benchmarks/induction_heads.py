"""Induction heads over seeds: each run directory given (e.g. a multirun of experiment=induction_heads) opened in
TransformerLens and measured as notebooks/9_induction_heads.ipynb measures one (TransformerLens's test: 100 random
sequences of 10 letters, each twice): the loss on the first and second copy, each head's induction score (layer
1) and previous-token score (layer 0), and the second copy's loss with the induction heads (score > 0.3) zeroed.

    python train.py -m experiment=induction_heads seed=0,1,2 logger=none hydra.sweep.dir=multirun/induction
    python benchmarks/induction_heads.py multirun/induction/{0,1,2}

Prints one markdown row a run (experiments/induction_heads.md records them).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import transformer_lab


def measure(run_dir: str, half: int = 10) -> dict:
    run = transformer_lab.load(run_dir)
    bridge = run.to_transformer_lens()
    first = torch.randint(0, run.model.config.vocab_size, (100, half), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([first, first], dim=1)

    def copies(logits) -> tuple[float, float]:  # the mean loss on the first copy and on the second
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none").mean(0)
        return round(loss[: half - 1].mean().item(), 2), round(loss[half:].mean().item(), 2)

    logits, cache = bridge.run_with_cache(tokens)
    second = torch.arange(half, 2 * half)
    induction = cache["blocks.1.attn.hook_pattern"][:, :, second, second - half + 1].mean((0, 2))
    previous = cache["blocks.0.attn.hook_pattern"].diagonal(offset=-1, dim1=-2, dim2=-1).mean((0, 2))
    heads = [h for h in range(len(induction)) if induction[h] > 0.3]

    def zeroed(z, hook):  # z: (batch, position, head, d_head)
        z[:, :, heads] = 0.0
        return z

    ablated = bridge.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", zeroed)])
    return {
        "run": run_dir,
        "seed": run.config.seed,
        "pos_encoding": run.config.model.pos_encoding,
        "train_time_s": run.summary.get("train_time_s"),
        "val_loss": round(run.summary["val/loss"], 3),
        "copies": copies(logits),
        "ablated": copies(ablated)[1] if heads else None,
        "induction": [round(v, 2) for v in induction.tolist()],
        "previous": [round(v, 2) for v in previous.tolist()],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (or checkpoints) of a GPT trained on data=repeats")
    runs = parser.parse_args().runs
    print(
        "| positions | seed | train s | val/loss | loss 1st / 2nd copy | 2nd, induction heads zeroed | induction (L1) | previous-token (L0) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for run_dir in runs:
        m = measure(run_dir)
        print(
            f"| {m['pos_encoding']} | {m['seed']} | {m['train_time_s']} | {m['val_loss']} | {m['copies'][0]} / "
            f"{m['copies'][1]} | {m['ablated'] or '(none to zero)'} | {m['induction']} | {m['previous']} |"
        )
