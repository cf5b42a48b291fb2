"""The anchor of benchmarks/anchor.py: nanoGPT's train.py with config/train_shakespeare_char.py, as a bare PyTorch
loop, on this repository's GPT (models/gpt.py, whose defaults are nanoGPT's model: no biases, GELU, tied embedding,
GPT-2 init at std 0.02, attention through SDPA, flash attention on a GPU) and its Shakespeare data (nanoGPT's
prepare.py split: the first 90% of the characters to train on). nanoGPT's own code cannot be fetched here: this is
its loop, step for step, around this repository's model.

    python benchmarks/anchor_loop.py [--target 1.47] [--out DIR] [--no-compile] [--compile-backend inductor]
        [--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 ...]

nanoGPT's recipe: 6 layers x 6 heads x 384, context 256, batch 64, dropout 0.2, AdamW (fused on a GPU) lr 1e-3
-> 1e-4 cosine over 5,000 iterations after 100 of warmup, betas (0.9, 0.99), weight decay 0.1 on matrices, gradient
clipping at 1.0, TF32 matmuls, bf16 autocast on a GPU that has it (fp16 with a GradScaler on one that has not, no
autocast on the CPU: nanoGPT's choices), torch.compile, and every 250 iterations nanoGPT's estimate_loss (200
random batches of each split, val reported) and a checkpoint when val improved. With --target it stops at the first
estimate <= target; either way it writes DIR/result.json (the step, the val loss there, whether it reached the
target, the loss on the whole validation split, the seconds since the process began).
"""

import time

START = time.time()  # the process's own start: imports count, as in nanoGPT's

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from transformer_lab.data.shakespeare import ShakespeareData  # noqa: E402
from transformer_lab.models.gpt import GPT, GPTConfig  # noqa: E402
from transformer_lab.tasks.optim import adamw, warmup_cosine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--target", type=float, default=None, help="stop at the first val loss <= this")
parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "anchor_loop", help="checkpoint and result.json")
parser.add_argument("--data-dir", default=str(ROOT / "data"))
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--n-layer", type=int, default=6)
parser.add_argument("--n-head", type=int, default=6)
parser.add_argument("--n-embd", type=int, default=384)
parser.add_argument("--block-size", type=int, default=256)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--dropout", type=float, default=0.2)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--min-lr", type=float, default=1e-4)
parser.add_argument("--warmup-iters", type=int, default=100)
parser.add_argument("--max-iters", type=int, default=5000)  # (nanoGPT's lr_decay_iters is max_iters here)
parser.add_argument("--eval-interval", type=int, default=250)
parser.add_argument("--eval-iters", type=int, default=200)
parser.add_argument("--log-interval", type=int, default=10)
# (not nanoGPT's: a cap for a matrix with a time budget; the schedule still runs over --max-iters)
parser.add_argument("--give-up-at", type=int, default=None, help="stop after the evaluation at this iteration")
parser.add_argument("--no-compile", dest="compile", action="store_false")
# inductor is nanoGPT's (torch.compile's default); "eager" traces with dynamo and compiles nothing, which is how
# the CPU smoke test runs the compiled path without inductor's minutes of C++ compilation
parser.add_argument("--compile-backend", default="inductor")
args = parser.parse_args()

WEIGHT_DECAY, BETAS, GRAD_CLIP = 0.1, (0.9, 0.99), 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"
# nanoGPT's: bf16 autocast where the GPU has it, else fp16 (with loss scaling); float32 on the CPU
if device == "cuda":
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    autocast = torch.autocast("cuda", dtype=dtype)
else:
    dtype, autocast = torch.float32, contextlib.nullcontext()
torch.manual_seed(args.seed)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True

data = ShakespeareData(data_dir=args.data_dir, block_size=args.block_size, batch_size=args.batch_size)
data.setup()
splits = {"train": data.train_tokens, "val": data.val_tokens}
offsets = torch.arange(args.block_size + 1)


def get_batch(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's get_batch: batch_size random windows of the split, from the global generator, pinned and copied
    to the GPU without waiting (one indexing in place of nanoGPT's stack of slices: the same windows, less CPU)."""
    tokens = splits[split]
    starts = torch.randint(len(tokens) - args.block_size, (args.batch_size,))
    windows = tokens[starts[:, None] + offsets]
    x, y = windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
    if device == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


class WithLoss(nn.Module):
    """nanoGPT's model returns its loss from forward and is compiled with it; this repository's GPT returns logits,
    so the cross-entropy goes inside the module that is compiled."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.model(x).flatten(0, 1), y.flatten())


config = GPTConfig(
    vocab_size=data.vocab_size,
    block_size=args.block_size,
    n_layer=args.n_layer,
    n_head=args.n_head,
    n_embd=args.n_embd,
    dropout=args.dropout,
    bias=False,
)
model = GPT(config).to(device)
# nanoGPT's configure_optimizers: matrices decay, vectors do not; fused AdamW on CUDA
optimizer = adamw(model, args.lr, WEIGHT_DECAY, BETAS, 1e-8, fused=device == "cuda")
scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
with_loss = WithLoss(model)
step_model = torch.compile(with_loss, backend=args.compile_backend) if args.compile else with_loss


@torch.no_grad()
def estimate_loss() -> dict[str, float]:
    """nanoGPT's estimate_loss: the mean of eval_iters random batches of each split, in eval mode."""
    out = {}
    step_model.eval()
    for split in ("train", "val"):
        losses = torch.zeros(args.eval_iters)
        for k in range(args.eval_iters):
            x, y = get_batch(split)
            with autocast:
                losses[k] = step_model(x, y).item()
        out[split] = losses.mean().item()
    step_model.train()
    return out


@torch.no_grad()
def whole_val_split_loss() -> float:
    """What train.py logs as val/loss for this preset: the mean over the validation split's non-overlapping windows
    (uncompiled: a last, shorter batch would make the compiled module compile again)."""
    model.eval()
    tokens, block = data.val_tokens, args.block_size
    n = (len(tokens) - 1) // block
    windows = tokens[(torch.arange(n) * block)[:, None] + offsets].to(device)
    total = 0.0
    for i in range(0, n, args.batch_size):
        w = windows[i : i + args.batch_size]
        with autocast:
            total += with_loss(w[:, :-1], w[:, 1:]).item() * len(w)
    model.train()
    return total / n


args.out.mkdir(parents=True, exist_ok=True)
print(f"anchor: {model.num_params() / 1e6:.2f}M parameters on {device} ({dtype})")
x, y = get_batch("train")  # one batch ahead, as nanoGPT fetches it
iter_num, evaluated_at, best_val_loss, losses = 0, 0, float("inf"), {"val": float("nan")}
t0 = time.time()
while True:
    for group in optimizer.param_groups:  # nanoGPT's get_lr is warmup_cosine (its lr_decay_iters = max_iters)
        group["lr"] = warmup_cosine(iter_num, args.lr, args.min_lr, args.warmup_iters, args.max_iters)
    if iter_num % args.eval_interval == 0:
        losses, evaluated_at = estimate_loss(), iter_num
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        if losses["val"] < best_val_loss:  # nanoGPT's always_save_checkpoint=False for this config
            best_val_loss = losses["val"]
            if iter_num > 0:
                checkpoint = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "model_args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "iter_num": iter_num,
                    "best_val_loss": best_val_loss,
                }
                torch.save(checkpoint, args.out / "ckpt.pt")
        if args.target is not None and losses["val"] <= args.target:
            break
        if args.give_up_at is not None and iter_num >= args.give_up_at:
            break
    with autocast:
        loss = step_model(x, y)
    x, y = get_batch("train")  # the next batch is drawn while the GPU works on this one
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % args.log_interval == 0:
        t1 = time.time()
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {1000 * (t1 - t0):.2f}ms", flush=True)  # (a sync)
        t0 = t1
    iter_num += 1
    if iter_num > args.max_iters:
        break

result = {
    "step": evaluated_at,  # the iteration of the last evaluation: where it stopped
    "val_loss": losses["val"],
    "val_loss_best": best_val_loss,
    "reached": args.target is not None and losses["val"] <= args.target,
    "whole_val_split_loss": whole_val_split_loss(),
    "seconds": time.time() - START,
    "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
}
(args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
print(f"anchor: {json.dumps(result)}", flush=True)
