"""What a model attends to, captured and drawn: the maps of every layer and head for one text, shared by the
`attention` command (commands/attention.py), the training callback that draws them as a run trains
(callbacks/attention_images.py) and the Python API (`attention_of`). The weights are those each attention layer
gives through the attention protocol (models/layers.py `DrawsAttention`, captured by `attention_maps`): ours,
the model's own softmax(QKᵀ/√d + mask) computed beside its attention (the output is unchanged); a user's layer,
whatever it declares (a linear attention's normalised kernel scores: docs/extending.md, "Draw your own
attention")."""

from __future__ import annotations

import re
from collections.abc import Iterator

import torch

from transformer_lab.batching.base import encoder
from transformer_lab.errors import UserError, keyed

MOST_TOKENS = 512  # a side of the maps drawn


def token_names(datamodule, ids: list[int]) -> list[str]:
    """Each id as text, its whitespace shown (`␣`, `\\n`); an id that decodes to nothing by its special name
    (the batches' own, [CLS], then the data's <pad>, <bos>, <eos>, <sep>), else as #id."""
    specials = datamodule.data.specials
    names = {specials.pad: "<pad>", specials.bos: "<bos>", specials.eos: "<eos>", specials.sep: "<sep>"}
    names.update(datamodule.special_names)
    out = []
    for i in ids:
        try:
            text = datamodule.decode([i])
        except Exception:  # noqa: BLE001  (a user's decode() that cannot show one id alone)
            text = ""
        shown = text.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
        out.append(shown if text else names.get(i, f"#{i}"))
    return out


def source_ids(model, datamodule, text: str) -> list[int]:
    """The text as the model's input ids, refused in one line where the model could not read it whole."""
    with keyed("text"):
        ids = encoder(datamodule)(text)
    limit = getattr(model.config, "block_size", None)
    if limit is not None and len(ids) > limit:
        raise UserError(f"text: {len(ids)} tokens, more than the model reads ({limit}, model.block_size): shorten it")
    read = getattr(datamodule.data, "max_tokens", None)  # a source the batches would cut to it (translation)
    source = len(encoder(datamodule.data)(text)) if read is not None else 0
    if read is not None and source > read:
        raise UserError(
            f"text: {source} tokens, more than the model read in training ({read}, data.max_tokens): shorten it"
        )
    if len(ids) > MOST_TOKENS:
        raise UserError(f"text: {len(ids)} tokens; the maps of at most {MOST_TOKENS} are drawn: shorten it")
    return ids


def inputs(model, datamodule, args: dict) -> tuple[tuple[torch.Tensor, ...], dict[str, list[int]]]:
    """The model's forward() arguments for the text, and the token ids on each side (source, target). An
    encoder-decoder's target: `target`'s text, else its greedy output."""
    ids = source_ids(model, datamodule, args["text"])
    limit = getattr(model.config, "block_size", None)
    src = torch.tensor([ids], device=args["device"])
    if type(model).architecture != "encoder-decoder":
        if args["target"]:
            raise UserError(f"target: only an encoder-decoder has one; {type(model).__qualname__} reads the text alone")
        return (src,), {"source": ids}
    specials = datamodule.data.specials
    if args["target"] is not None:
        with keyed("target"):
            target = encoder(datamodule.data)(args["target"])
        if len(target) + 1 > min(limit or MOST_TOKENS, MOST_TOKENS):
            most = min(limit or MOST_TOKENS, MOST_TOKENS) - 1
            raise UserError(f"target: {len(target)} tokens, more than the {most} drawn after <bos>: shorten it")
    else:
        from transformer_lab.tasks.decoding import decode

        longest = min(src.size(1) + args["max_extra_len"], limit or MOST_TOKENS, MOST_TOKENS) - 1
        with torch.no_grad():
            target = decode(model, src, 1, longest, specials.bos, specials.eos).outputs[0]
    tgt = [specials.bos, *target]
    return (src, torch.tensor([tgt], device=args["device"])), {"source": ids, "target": tgt}


def queries_and_keys(layer: str, cross: bool, sides: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """The tokens along a layer's queries and keys: in an encoder-decoder (EncoderDecoder: `encoder` and `decoder`),
    the encoder's layers read the source, the decoder's the target, and cross-attention's keys are the source."""
    if "target" not in sides:
        return sides["source"], sides["source"]
    encoder = layer.startswith("encoder.")
    queries = sides["source"] if encoder else sides["target"]
    return queries, sides["source"] if encoder or cross else sides["target"]


def draw(title: str, layers: list[torch.Tensor], queries: list[str], keys: list[str]):
    """A grid of heatmaps, a row per layer and a column per head, queries down and keys across: an (H, W, 4)
    uint8 image."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    heads = layers[0].size(0)
    cell = min(max(2.2, 0.16 * max(len(queries), len(keys))), 12.0)  # inches a map (long inputs: unlabelled)
    fig = Figure(figsize=(cell * heads + 1.5, cell * len(layers) + 1.0), layout="constrained")
    axes = fig.subplots(len(layers), heads, squeeze=False)
    labelled = max(len(queries), len(keys)) <= 64
    size = 8 if max(len(queries), len(keys)) <= 16 else 6
    for i, weights in enumerate(layers):
        for h in range(heads):
            ax = axes[i][h]
            image = ax.imshow(
                weights[h].numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest"
            )
            ax.set_title(f"layer {i} head {h}", fontsize=8)
            ax.set_xticks(range(len(keys)) if labelled else [])
            ax.set_yticks(range(len(queries)) if labelled and h == 0 else [])
            if labelled:
                ax.set_xticklabels(keys, rotation=90, fontsize=size)
                if h == 0:
                    ax.set_yticklabels(queries, fontsize=size)
    fig.suptitle(f"{title}: queries down, keys across")
    fig.colorbar(image, ax=axes, shrink=0.6)
    fig.set_dpi(min(100.0, 20000 / (cell * max(heads, len(layers)) + 1.5)))  # at most ~20,000 pixels a side
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def captured(model, datamodule, args: dict) -> tuple[dict, dict[str, list[str]], dict[str, tuple[list[str], bool]]]:
    """The model's attention on the text: ({layer: (heads, queries, keys)}, the tokens of each side, {kind of
    attention ("decoder.cross_attn"): (its layers in order, whether it attends to the source from the target)})."""
    from transformer_lab.models.layers import attention_maps

    forward_args, ids = inputs(model, datamodule, args)
    with torch.no_grad(), attention_maps(model) as maps:
        model(*forward_args)
    sides = {side: token_names(datamodule, side_ids) for side, side_ids in ids.items()}
    weights = {}
    kinds: dict[str, tuple[list[str], bool]] = {}  # "decoder.cross_attn" -> (its layers in order, cross?)
    for layer, calls in maps.items():
        if not calls:  # (a layer this input does not reach)
            continue
        kind = re.sub(r"\.\d+(\.|$)", r"\1", layer)
        weights[layer] = checked_weights(layer, calls[0], *queries_and_keys(kind, calls.cross, sides))
        kinds.setdefault(kind, ([], calls.cross))[0].append(layer)
    return weights, sides, kinds


def checked_weights(layer: str, weights: torch.Tensor, queries: list[str], keys: list[str]) -> torch.Tensor:
    """A layer's first call's weights for the one text, (heads, queries, keys); a user's layer that added another
    shape through the attention protocol is refused in one line naming it (drawing it would fail, or mislabel)."""
    expected = f"(1, heads, {len(queries)}, {len(keys)})"
    if weights.dim() != 4 or weights.size(0) != 1 or tuple(weights.shape[2:]) != (len(queries), len(keys)):
        raise UserError(
            f"{layer}: its capture_attention() added weights of shape {tuple(weights.shape)}; the attention "
            f"protocol (models/layers.py DrawsAttention) wants (batch, heads, queries, keys), here {expected}"
        )
    return weights[0].cpu().contiguous()


def drawings(model, datamodule, args: dict, title: str = "") -> Iterator[tuple[str, object]]:
    """(kind of attention, its image) for the text, each kind in turn (the training callback's)."""
    weights, sides, kinds = captured(model, datamodule, args)
    for kind, (layers, cross) in kinds.items():
        queries, keys = queries_and_keys(kind, cross, sides)
        yield kind, draw(f"{title} {kind}".strip(), [weights[layer] for layer in layers], queries, keys)


def check_model(model) -> None:
    """A model with no module implementing the attention protocol is refused: nothing would be drawn."""
    from transformer_lab.models.layers import attention_layers

    if not attention_layers(model):
        raise UserError(
            f"{type(model).__qualname__} has no layer with capture_attention(capture), the attention protocol "
            '(models/layers.py DrawsAttention; docs/extending.md, "Draw your own attention"): nothing to draw'
        )


def attention_of(
    model, datamodule, text: str, target: str | None = None, max_extra_len: int = 50
) -> tuple[dict[str, torch.Tensor], dict[str, list[str]]]:
    """({layer: its weights (heads, queries, keys)}, {side: its tokens}) for one text, the capture the `attention`
    command makes, on the model's own device, nothing written (the Python API's). An encoder-decoder's target:
    `target`'s text, else its greedy output, at most `max_extra_len` tokens past the source."""
    if not isinstance(text, str) or not text:
        raise UserError(f'text: which input? give text="..." (a non-empty text), got {text!r}')
    if isinstance(max_extra_len, bool) or not isinstance(max_extra_len, int) or not 1 <= max_extra_len <= MOST_TOKENS:
        raise UserError(f"max_extra_len: an integer in 1..{MOST_TOKENS}, got {max_extra_len!r}")
    check_model(model)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    options = {"text": text, "target": target, "max_extra_len": max_extra_len, "device": str(device)}
    weights, sides, _ = captured(model, datamodule, options)
    return weights, sides
