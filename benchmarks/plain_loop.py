"""The shakespeare_char_cpu recipe as a plain PyTorch loop (nanoGPT's train.py, minus the framework),
on this repo's model and data: the yardstick for what Lightning + Hydra cost.

    python benchmarks/plain_loop.py [--seed 1337] [--iters 2000]
"""

import argparse
import time

START = time.time()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from transformer_lab.data.batches import RandomWindows  # noqa: E402
from transformer_lab.data.shakespeare import ShakespeareDataModule  # noqa: E402
from transformer_lab.models import GPT, GPTConfig  # noqa: E402
from transformer_lab.tasks.optim import adamw, warmup_cosine  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--iters", type=int, default=2000)
args = parser.parse_args()

torch.manual_seed(args.seed)
data = ShakespeareDataModule("data", block_size=64, batch_size=12, seed=args.seed)
data.setup()
model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128))
optimizer = adamw(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, fused=True)  # as optim.fused's default
val_x, val_y = data.val_windows()


@torch.no_grad()
def val_loss() -> float:
    model.eval()
    losses = [F.cross_entropy(model(val_x[i:i + 12]).flatten(0, 1), val_y[i:i + 12].flatten())
              for i in range(0, 240, 12)]
    model.train()
    return torch.stack(losses).mean().item()


batches = iter(RandomWindows(data.train_tokens, 64, 12, args.seed))
train_time = 0.0
for step in range(args.iters + 1):
    if step % 250 == 0:
        print(f"step {step}: val loss {val_loss():.4f}", flush=True)
    if step == args.iters:
        break
    t = time.perf_counter()
    for group in optimizer.param_groups:
        group["lr"] = warmup_cosine(step, 1e-3, 1e-4, 100, args.iters)
    x, y = next(batches)
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    train_time += time.perf_counter() - t
print(f"{1000 * train_time / args.iters:.1f} ms/iter, wall {time.time() - START:.1f} s, "
      f"{12 * 64 * args.iters / train_time:.0f} tokens/s")
