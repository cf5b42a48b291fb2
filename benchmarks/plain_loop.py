"""nanoGPT's CPU recipe (shakespeare_char_cpu's until issue #45: its NANOGPT_RECIPE) as a plain PyTorch loop (nanoGPT's train.py, minus the framework),
on this repo's model and data: the yardstick for what Lightning + Hydra cost, and for the val loss.

    python benchmarks/plain_loop.py [--seed 1337] [--iters 2000] [--order repo|nanogpt]

--order repo (default) draws training batches as `train.py` does (RandomWindows, batch i seeded by
(seed, i)) and evaluates on the fixed validation windows, as `train.py` does: its val loss is the
Lightning run's, to the digit. --order nanogpt draws everything from torch's global generator in the
order nanoGPT's train.py does (model init, one batch ahead, 20 random train and 20 random val batches
at each evaluation) and prints nanoGPT's estimate, 20 random val batches, as nanoGPT prints it.
Both end with the final model's loss on the fixed validation windows and on the whole val split.
"""

import argparse
import time

START = time.time()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from transformer_lab.batching.windows import TextWindows  # noqa: E402
from transformer_lab.data.batches import RandomWindows  # noqa: E402
from transformer_lab.data.shakespeare import ShakespeareData  # noqa: E402
from transformer_lab.models.gpt import GPT, GPTConfig  # noqa: E402
from transformer_lab.tasks.optim import adamw, warmup_cosine  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--iters", type=int, default=2000)
parser.add_argument("--order", choices=["repo", "nanogpt"], default="repo")
args = parser.parse_args()
BLOCK, BATCH, EVAL_BATCHES = 64, 12, 20

torch.manual_seed(args.seed)
data = ShakespeareData(data_dir="data", block_size=BLOCK, batch_size=BATCH, seed=args.seed)
data.setup()
model = GPT(GPTConfig(vocab_size=65, block_size=BLOCK, n_layer=4, n_head=4, n_embd=128))
optimizer = adamw(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, fused=True)  # as optim.fused's default
windows = TextWindows(data, BATCH)
windows.setup()
val_x, val_y = (torch.cat(t) for t in zip(*windows.val_dataloader()))  # the runs' validation windows, in order


def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def random_batch(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's get_batch: BATCH random windows, from the global generator."""
    starts = torch.randint(len(tokens) - BLOCK, (BATCH,))
    windows = tokens[starts[:, None] + torch.arange(BLOCK + 1)]
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def fixed_val_loss() -> float:
    """What train.py logs as val/loss: the first EVAL_BATCHES batches of the fixed validation windows."""
    return (
        torch.stack(
            [loss_of(val_x[i : i + BATCH], val_y[i : i + BATCH]) for i in range(0, EVAL_BATCHES * BATCH, BATCH)]
        )
        .mean()
        .item()
    )


@torch.no_grad()
def nanogpt_val_loss() -> float:
    """nanoGPT's estimate_loss: EVAL_BATCHES random batches of each split (the train ones are drawn
    only to keep the generator in step), val reported."""
    for _ in range(EVAL_BATCHES):
        random_batch(data.train_tokens)
    return torch.stack([loss_of(*random_batch(data.val_tokens)) for _ in range(EVAL_BATCHES)]).mean().item()


@torch.no_grad()
def whole_split_loss() -> float:
    n = (len(data.val_tokens) - 1) // BLOCK
    x, y = data.val_tokens[: n * BLOCK].view(n, BLOCK), data.val_tokens[1 : n * BLOCK + 1].view(n, BLOCK)
    return sum(loss_of(x[i : i + 64], y[i : i + 64]).item() * len(x[i : i + 64]) for i in range(0, n, 64)) / n


def evaluate(estimate) -> float:
    model.eval()
    loss = estimate()
    model.train()
    return loss


if args.order == "repo":
    stream = iter(RandomWindows(data.train_tokens, BLOCK, BATCH, args.seed))
    next_batch, val_loss = lambda: next(stream), fixed_val_loss
else:
    next_batch, val_loss = lambda: random_batch(data.train_tokens), nanogpt_val_loss
x, y = next_batch()  # one batch ahead, as nanoGPT fetches it
train_time = 0.0
for step in range(args.iters + 1):
    if step % 250 == 0:
        print(f"step {step}: val loss {evaluate(val_loss):.4f}", flush=True)
    if step == args.iters:
        break
    t = time.perf_counter()
    for group in optimizer.param_groups:
        group["lr"] = warmup_cosine(step, 1e-3, 1e-4, 100, args.iters)
    loss = loss_of(x, y)
    x, y = next_batch()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    train_time += time.perf_counter() - t
print(
    f"final model: fixed val windows {evaluate(fixed_val_loss):.4f}, whole val split {evaluate(whole_split_loss):.4f}"
)
print(
    f"{1000 * train_time / args.iters:.1f} ms/iter, wall {time.time() - START:.1f} s, "
    f"{BATCH * BLOCK * args.iters / train_time:.0f} tokens/s"
)
