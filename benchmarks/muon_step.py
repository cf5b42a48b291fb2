"""What one Muon step costs: torch's torch.optim.Muon (Newton-Schulz matrix by matrix) against StackedMuon
(tasks/optim.py: each shape's matrices in one batched matmul, the same update bit for bit), and StackedMuon with
Newton-Schulz in float32 (optim.muon_precision=float32, a CPU without bf16 units' default), on the hidden matrices of
a gpt (by default shakespeare_char_cpu's), interleaved.

    python benchmarks/muon_step.py [--n_layer 4] [--n_embd 128] [--rounds 3] [--steps 100]

Prints each round's milliseconds per optimizer step for both, then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def matrices(n_layer: int, n_embd: int) -> list[torch.Size]:
    """The hidden matrices of a gpt of this size (shakespeare_char_cpu's: 4 layers, 128 wide)."""
    from transformer_lab.models.gpt import GPT, GPTConfig
    from transformer_lab.tasks.optim import hidden_matrices

    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=n_layer, n_head=4, n_embd=n_embd, bias=False))
    return [p.shape for n, p in model.named_parameters() if n in hidden_matrices(model)]


def per_step(optimizer: torch.optim.Optimizer, steps: int) -> float:
    for _ in range(5):
        optimizer.step()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> int:
    from transformer_lab.tasks.optim import StackedMuon

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n_layer", type=int, default=4)
    parser.add_argument("--n_embd", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    for key in ("n_layer", "rounds", "steps"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be at least 1, got {getattr(args, key)}")
    if args.n_embd < 4 or args.n_embd % 4:
        parser.error(f"--n_embd must be a positive multiple of the model's 4 heads, got {args.n_embd}")
    shapes = matrices(args.n_layer, args.n_embd)
    print(
        f"gpt {args.n_layer} x {args.n_embd}: {len(shapes)} matrices, {len({tuple(s) for s in shapes})} shapes; threads {torch.get_num_threads()}"
    )
    torch.manual_seed(0)
    optimizers = {}
    kinds = {
        "torch.optim.Muon": torch.optim.Muon,
        "StackedMuon": StackedMuon,
        "StackedMuon float32": lambda params, **kw: StackedMuon(params, torch.float32, **kw),
    }
    for name, make in kinds.items():
        params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        optimizers[name] = make(params, lr=0.02)
    times = {name: [] for name in optimizers}
    for i in range(args.rounds):
        for name in list(optimizers)[i % 3 :] + list(optimizers)[: i % 3]:  # A B C, B C A, ...
            times[name].append(per_step(optimizers[name], args.steps))
        print(f"round {i}: " + ", ".join(f"{n} {times[n][-1]:.2f} ms" for n in optimizers), flush=True)
    medians = {n: statistics.median(t) for n, t in times.items()}
    print(", ".join(f"median {n} {m:.2f} ms" for n, m in medians.items()))
    print(f"StackedMuon / torch: {medians['StackedMuon'] / medians['torch.optim.Muon']:.3f}x")
    print(f"StackedMuon float32 / bfloat16: {medians['StackedMuon float32'] / medians['StackedMuon']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
