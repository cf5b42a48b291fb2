"""What a training step of the shakespeare_char_cpu model costs on this CPU, and what compile or bf16 would
change: the measurements behind experiments/shakespeare_char_cpu.md, "≤ 0.85x the bare loop".

    python benchmarks/cpu_step.py [--steps 300] [--skip-bf16]

1. The CPU: model name and whether it has AVX-512, AVX512-BF16 or AMX (from /proc/cpuinfo).
2. Where a step goes: torch.profiler's self time by op over 30 steps, grouped (matmul, attention, GELU, ...), in
   float32, bf16 autocast, and bf16 with the math attention kernel.
3. Per-step time eager, whole model compiled and each block compiled (model.compile / block.compile), in the order
   eager, whole, blocks, eager, whole, blocks (the second of each finds inductor's cache warm), with the time of
   the first two steps (compilation).
4. float32 against bfloat16 autocast (attention on torch's kernel, flash, and on the math kernel: what
   `attention_kernel=math` picks) for a forward, backward and AdamW step, three interleaved rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.tasks.optim import adamw

GROUPS = {
    "mm": "matmul",
    "addmm": "matmul",
    "bmm": "matmul",
    "scaled_dot_product": "attention",
    "gelu": "GELU",
    "layer_norm": "LayerNorm",
    "adamw": "AdamW",
}


def cpu() -> str:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = set(text.split())
    units = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name}, {torch.get_num_threads()} threads, flags: {' '.join(units) or 'none of avx2/avx512/amx'}"


def setup(mode: str):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128))
    if mode == "whole":
        model.compile()
    elif mode == "blocks":
        for block in model.blocks:
            block.compile()
    optimizer = adamw(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, fused=True)
    x, y = torch.randint(65, (12, 64)), torch.randint(65, (12, 64))

    def step(bf16: bool = False, math: bool = False) -> None:
        kernel = sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext()  # (torch picks: flash)
        with kernel, torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip-bf16", action="store_true")
    args = parser.parse_args()
    print(f"CPU: {cpu()}; torch {torch.__version__}")

    kinds = {"float32": (False, False)}
    if not args.skip_bf16:
        kinds.update({"bf16": (True, False), "bf16, math attention": (True, True)})
    profiles = {}
    for kind, (bf16, math) in kinds.items():
        step = setup("eager")
        for _ in range(20):
            step(bf16, math)
        with torch.profiler.profile() as prof:
            for _ in range(30):
                step(bf16, math)
        profiles[kind] = {}
        for event in prof.key_averages():
            if event.key.startswith("aten::"):
                group = next((g for k, g in GROUPS.items() if k in event.key.lower()), "other aten ops")
                profiles[kind][group] = profiles[kind].get(group, 0.0) + event.self_cpu_time_total / 30 / 1000
    print(
        "\nwhere a step goes, ms of aten self time a step under the profiler (the math kernel's matmuls count as matmul):"
    )
    print(f"  {'':<16}" + "".join(f"{kind:>22}" for kind in kinds))
    for group in sorted(profiles["float32"], key=lambda g: -profiles["float32"][g]):
        print(f"  {group:<16}" + "".join(f"{profiles[kind].get(group, 0.0):22.2f}" for kind in kinds))
    print(f"  {'total':<16}" + "".join(f"{sum(profiles[kind].values()):22.2f}" for kind in kinds))

    print(f"\nper-step time over {args.steps} steps (first two steps: compilation, if any):")
    times = {}
    for mode in ("eager", "whole", "blocks") * 2:
        step = setup(mode)
        start = time.perf_counter()
        step(), step()
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        ms = (time.perf_counter() - start) / args.steps * 1000
        times.setdefault(mode, []).append(ms)
        print(f"  {mode:<7} first two steps {first:5.1f} s, then {ms:.2f} ms a step")
    print("  medians: " + ", ".join(f"{m} {statistics.median(t):.1f} ms" for m, t in times.items()))

    if not args.skip_bf16:
        step, rounds = setup("eager"), []
        for bf16, math in kinds.values():
            step(bf16, math)
        for _ in range(3):
            times = []
            for bf16, math in kinds.values():
                start = time.perf_counter()
                for _ in range(20):
                    step(bf16, math)
                times.append((time.perf_counter() - start) / 20 * 1000)
            rounds.append(times)
        print(f"\n{' / '.join(kinds)}, ms a step: " + ", ".join(" / ".join(f"{t:.1f}" for t in r) for r in rounds))
        for i, kind in enumerate(kinds):
            if i:
                print(f"  {kind} / float32, median: {statistics.median(r[i] / r[0] for r in rounds):.2f}")


if __name__ == "__main__":
    main()
