"""Draw what a trained model attends to: the attention weights of every layer and head for one input.

    python -m transformer_lab attention outputs/DATE/TIME text="ROMEO: But soft"
    python -m transformer_lab attention outputs/DATE/TIME text="Ein Mann fährt Fahrrad." out=maps/

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file, of any
model whose attention is the repository's layer (models/layers.py: gpt, encdec, bert, t5, or a model of your own
built from it). The text becomes the model's input as its inference command reads it (`sample`, `translate`,
`fill`, `classify`). An encoder-decoder's target is its own greedy output for that input (`target=...` gives
one instead), so the decoder's self-attention and its cross-attention (each target token over the source: a
translation's alignment) are those of the model translating it.

Each kind of attention is one PNG: a grid of heatmaps, a row per layer and a column per head, the queries down
and the keys across, each labelled with its token; `attention.safetensors` holds the weights themselves
({layer: (heads, queries, keys)}) and `tokens.json` the tokens. They go to `out` (a new or empty folder;
default: the run's attention/N/, the next free N). The weights are the model's own softmax(QKᵀ/√d + mask),
computed beside its attention while captured (`attention_maps` in models/layers.py); the output is unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import torch

from transformer_lab.cli import Command, run
from transformer_lab.errors import UserError
from transformer_lab.inference import encoder, load, with_defaults

DEFAULTS = {"ckpt": None, "text": None, "target": None, "out": None, "max_extra_len": 50, "device": "cpu"}
MINIMUMS = {"max_extra_len": 1}


def token_names(datamodule, ids: list[int]) -> list[str]:
    """Each id as text: the data's decoding of it alone, or a special token's name."""
    specials = datamodule.data.specials
    names = {specials.pad: "<pad>", specials.bos: "<bos>", specials.eos: "<eos>", specials.sep: "<sep>"}
    out = []
    for i in ids:
        try:
            text = datamodule.decode([i])
        except Exception:  # noqa: BLE001  (a user's decode() that cannot show one id alone)
            text = ""
        out.append(text if text.strip() else names.get(i, repr(text) if text else f"#{i}"))
    return out


def inputs(model, datamodule, args: dict) -> tuple[tuple[torch.Tensor, ...], dict[str, list[int]]]:
    """The model's forward() arguments for the text, and the token ids on each side (source, target)."""
    try:
        ids = encoder(datamodule)(args["text"])
    except ValueError as e:
        raise UserError(f"text: {e}") from None
    limit = getattr(model.config, "block_size", None)
    if limit is not None and len(ids) > limit:
        raise UserError(f"text: {len(ids)} tokens, more than the model reads ({limit}, model.block_size): shorten it")
    src = torch.tensor([ids], device=args["device"])
    if type(model).architecture != "encoder-decoder":
        return (src,), {"source": ids}
    specials = datamodule.data.specials
    if args["target"] == "":  # (the callback's check: the source alone)
        return (src,), {"source": ids}
    if args["target"] is not None:
        try:
            target = encoder(datamodule.data)(args["target"])
        except ValueError as e:
            raise UserError(f"target: {e}") from None
    else:
        from transformer_lab.tasks.decoding import decode

        with torch.no_grad():
            target = decode(model, src, 1, src.size(1) + args["max_extra_len"], specials.bos, specials.eos).outputs[0]
    tgt = [specials.bos, *target][: limit or None]
    return (src, torch.tensor([tgt], device=args["device"])), {"source": ids, "target": tgt}


def queries_and_keys(layer: str, cross: bool, sides: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """The tokens along a layer's queries and keys: in an encoder-decoder (EncoderDecoder: `encoder` and `decoder`),
    the encoder's layers read the source, the decoder's the target, and cross-attention's keys are the source."""
    if "target" not in sides:
        return sides["source"], sides["source"]
    encoder = layer.startswith("encoder.")
    queries = sides["source"] if encoder else sides["target"]
    return queries, sides["source"] if encoder or cross else sides["target"]


def out_folder(args: dict, checkpoint: Path) -> Path:
    """`out`, new or empty; by default the run's attention/N/ with the next free N."""
    if args["out"] is not None:
        out = Path(args["out"])
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UserError(f"out={out}: exists and is not an empty folder; give a new one (nothing is overwritten)")
        return out
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    n = 1
    while (run_dir / "attention" / str(n)).exists():
        n += 1
    return run_dir / "attention" / str(n)


def draw(title: str, layers: list[torch.Tensor], queries: list[str], keys: list[str]):
    """A grid of heatmaps, a row per layer and a column per head, queries down and keys across: an (H, W, 4)
    uint8 image."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    heads = layers[0].size(0)
    cell = max(2.2, 0.16 * max(len(queries), len(keys)))
    fig = Figure(figsize=(cell * heads + 1.2, cell * len(layers) + 0.8))
    axes = fig.subplots(len(layers), heads, squeeze=False)
    labelled = max(len(queries), len(keys)) <= 64
    size = 8 if max(len(queries), len(keys)) <= 16 else 6
    for i, weights in enumerate(layers):
        for h in range(heads):
            ax = axes[i][h]
            image = ax.imshow(weights[h].numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest")
            ax.set_title(f"layer {i} head {h}", fontsize=8)
            ax.set_xticks(range(len(keys)) if labelled else [])
            ax.set_yticks(range(len(queries)) if labelled and h == 0 else [])
            if labelled:
                ax.set_xticklabels(keys, rotation=90, fontsize=size)
                if h == 0:
                    ax.set_yticklabels(queries, fontsize=size)
    fig.suptitle(f"{title}: queries down, keys across")
    fig.colorbar(image, ax=axes, shrink=0.6)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def captured(model, datamodule, args: dict) -> tuple[dict, dict[str, list[str]], dict[str, tuple[list[str], bool]]]:
    """The model's attention on the text: ({layer: (heads, queries, keys)}, the tokens of each side, {kind of
    attention ("decoder.cross_attn"): (its layers in order, whether it attends to the source from the target)})."""
    from transformer_lab.models.layers import Attention, attention_maps

    forward_args, ids = inputs(model, datamodule, args)
    cross: set[str] = set()  # the layers called with a memory: cross-attention

    def noted(name: str):
        def hook(_, args, kwargs):
            if (args[1] if len(args) > 1 else kwargs.get("memory")) is not None:
                cross.add(name)

        return hook

    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, Attention)]
    hooks = [layer.register_forward_pre_hook(noted(name), with_kwargs=True) for name, layer in layers]
    try:
        with torch.no_grad(), attention_maps(model) as maps:
            model(*forward_args)
    finally:
        for hook in hooks:
            hook.remove()
    weights = {layer: calls[0][0].float().cpu().contiguous() for layer, calls in maps.items() if calls}  # (called ones)
    sides = {side: token_names(datamodule, side_ids) for side, side_ids in ids.items()}
    kinds: dict[str, tuple[list[str], bool]] = {}  # "decoder.cross_attn" -> (its layers in order, cross?)
    for layer in weights:
        kinds.setdefault(re.sub(r"\.\d+(\.|$)", r"\1", layer), ([], layer in cross))[0].append(layer)
    return weights, sides, kinds


def drawings(model, datamodule, args: dict, title: str = "") -> Iterator[tuple[str, object]]:
    """(kind of attention, its image) for the text, each kind in turn (the training callback's)."""
    weights, sides, kinds = captured(model, datamodule, args)
    for kind, (layers, cross) in kinds.items():
        queries, keys = queries_and_keys(kind, cross, sides)
        yield kind, draw(f"{title} {kind}".strip(), [weights[layer] for layer in layers], queries, keys)


def check_model(model) -> None:
    from transformer_lab.models.layers import Attention

    if not any(isinstance(m, Attention) for m in model.modules()):
        raise UserError(
            f"{type(model).__qualname__} has no attention layer of this repository's (models/layers.py Attention): "
            "nothing to draw"
        )


def attention(args: dict) -> Iterator[str]:
    from PIL import Image
    from safetensors.torch import save_file

    from transformer_lab.checkpoint import checkpoint_of

    args = with_defaults(args, DEFAULTS, MINIMUMS)
    if args["text"] is None:
        raise UserError('text: which input? give text="..."')
    checkpoint = checkpoint_of(args["ckpt"]) if args["ckpt"] else None
    model, datamodule = load(args["ckpt"], None, args["device"])
    check_model(model)
    out = out_folder(args, checkpoint)
    weights, sides, kinds = captured(model, datamodule, args)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for kind, (layers, cross) in kinds.items():
            queries, keys = queries_and_keys(kind, cross, sides)
            path = out / f"{kind}.png"
            Image.fromarray(draw(kind, [weights[layer] for layer in layers], queries, keys)).save(path)
            yield str(path)
        save_file(weights, out / "attention.safetensors")
        (out / "tokens.json").write_text(json.dumps({"text": args["text"], **sides}, ensure_ascii=False, indent=1) + "\n")
    except OSError as e:
        raise UserError(f"out={out}: cannot write it ({e.strerror or e})") from None
    yield str(out / "attention.safetensors")


COMMAND = Command("attention", __doc__, DEFAULTS, attention, text=("text", "target", "out", "device"))


def main(argv: list[str] | None = None) -> None:
    run("attention", argv)


if __name__ == "__main__":
    main()
