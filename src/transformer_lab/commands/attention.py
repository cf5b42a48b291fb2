"""Draw what a trained model attends to: the attention weights of every layer and head for one input.

    python -m transformer_lab attention outputs/DATE/TIME text="ROMEO: But soft"
    python -m transformer_lab attention outputs/DATE/TIME text="Ein Mann fährt Fahrrad." out=maps/

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file, of any
model whose attention layers implement the attention protocol (models/layers.py DrawsAttention: ours, in gpt,
encdec, bert, t5, and a layer of your own, such as a linear attention: docs/extending.md, "Draw your own
attention"). The text becomes the model's input as its inference command reads it (`sample`, `translate`,
`fill`, `classify`). An encoder-decoder's target is its own greedy output for that input (`target=...` gives
one instead), so the decoder's self-attention and its cross-attention (each target token over the source: a
translation's alignment) are those of the model translating it.

Each kind of attention is one PNG: a grid of heatmaps, a row per layer and a column per head, the queries down
and the keys across, each labelled with its token; `attention.safetensors` holds the weights themselves
({layer: (heads, queries, keys)}) and `tokens.json` the tokens. They go to `out` (a new or empty folder;
default: attention/N/ in the current folder, the next free N: a read never writes into the run), all at once: an interrupted call leaves nothing. The weights
are those each layer adds while captured (`attention_maps` in models/layers.py): ours, the model's own
softmax(QKᵀ/√d + mask), computed beside its attention; the output is unchanged. A text longer than the model
reads is refused, not cut; so are more than MOST_TOKENS tokens a side (the drawing of a longer one would not be
legible, nor fit in memory).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from transformer_lab.api.options import with_defaults
from transformer_lab.commands.cli import Command, run_command
from transformer_lab.errors import UserError
from transformer_lab.store.atomic import check_destination

DEFAULTS = {"ckpt": None, "text": None, "target": None, "out": None, "max_extra_len": 50, "device": "cpu"}
MINIMUMS = {"max_extra_len": 1}


def out_folder(args: dict) -> tuple[Path, bool]:
    """(`out`, new or empty, True; or attention/N/ in the current folder with the next free N, False)."""
    if args["out"] is not None:
        out = Path(args["out"])
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UserError(f"out={out}: exists and is not an empty folder; give a new one (nothing is overwritten)")
        check_destination(out, f"out={out}")
        return out, True
    n = 1
    while Path("attention", str(n)).exists():
        n += 1
    check_destination(Path("attention", str(n)), str(Path("attention", str(n))))  # (the current folder: not a run's)
    return Path("attention", str(n)), False


def put_in_place(folder: Path, out: Path, given: bool) -> Path:
    """The written folder renamed to `out` in one step (rename(2) takes an empty folder's place, never a full
    one's): where another call took it first, `out=` is refused and the run's next attention/N taken."""
    while True:
        try:
            folder.rename(out)
            return out
        except OSError as e:
            if given or not out.exists():
                shutil.rmtree(folder, ignore_errors=True)
                where = f"out={out}" if given else str(out)
                filled = out.is_dir() and any(out.iterdir())  # (an empty one that refuses: a read-only mount)
                why = "another call wrote there first" if filled else (e.strerror or str(e))
                raise UserError(f"{where}: cannot write it ({why}); nothing is overwritten") from None
            out = out.with_name(str(int(out.name) + 1))


def attention(args: dict) -> Iterator[str]:
    import os

    from PIL import Image
    from safetensors.torch import save_file

    from transformer_lab.analysis.attention import MOST_TOKENS, captured, check_model, draw, queries_and_keys
    from transformer_lab.api.run import load
    from transformer_lab.store.atomic import staging_folder
    from transformer_lab.store.checkpoint import checkpoint_of

    args = with_defaults(args, DEFAULTS, MINIMUMS)
    if args["max_extra_len"] > MOST_TOKENS:
        raise UserError(
            f"max_extra_len: at most {MOST_TOKENS} (the maps of longer targets are not drawn), got {args['max_extra_len']}"
        )
    if args["ckpt"]:
        checkpoint_of(args["ckpt"])  # (a path that holds no run is told before a missing text)
    if args["text"] is None:
        raise UserError('text: which input? give text="..."')
    out, given = out_folder(args)  # (where it writes: checked before the model loads)
    trained = load(args["ckpt"], args["device"])
    model, datamodule = trained.model, trained.datamodule
    check_model(model)
    weights, sides, kinds = captured(model, datamodule, args)
    # Written aside (the one writer's staging folder: gone on any error, Ctrl-C or SIGTERM) and renamed into place.
    with staging_folder(out, "out" if given else None) as folder:
        names = []
        for kind, (layers, cross) in kinds.items():
            queries, keys = queries_and_keys(kind, cross, sides)
            Image.fromarray(draw(kind, [weights[layer] for layer in layers], queries, keys)).save(
                folder / f"{kind}.png"
            )
            names.append(f"{kind}.png")
        save_file(weights, folder / "attention.safetensors")
        os.chmod(folder / "attention.safetensors", 0o666 & ~current_umask())  # (safetensors writes 0600)
        tokens = json.dumps({"text": args["text"], **sides}, ensure_ascii=False, indent=1)
        (folder / "tokens.json").write_text(tokens + "\n", encoding="utf-8")
        out = put_in_place(folder, out, given)
    yield from (str(out / name) for name in [*names, "attention.safetensors", "tokens.json"])


def current_umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


COMMAND = Command("attention", __doc__, DEFAULTS, attention, text=("text", "target", "out", "device"))


def main(argv: list[str] | None = None) -> None:
    run_command("attention", argv)


if __name__ == "__main__":
    main()
