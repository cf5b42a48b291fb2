"""A run's model opened for interpretability: TransformerLens on every model it can represent
(`to_transformer_lens`), and every named module's output of any model, a user's own too (`activations`).

    bridge = to_transformer_lens(run.model, run.meta)             # TransformerLens 4's TransformerBridge
    logits, cache = bridge.run_with_cache(tokens)                # cache["blocks.0.attn.hook_pattern"], ...
    acts = activations(run.model, tokens)                        # {"blocks.0.attn": tensor, ...}
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import version

import torch

from transformer_lab.errors import UserError, first_line

INSTALL = 'pip install -e ".[lens]"'


def transformer_lens(what: str = "to_transformer_lens"):
    """The transformer_lens package, or one line saying what installs it."""
    try:
        import transformer_lens
    except ImportError as e:
        missing = isinstance(e, ModuleNotFoundError) and (e.name or "transformer_lens").startswith("transformer_lens")
        why = "which is not installed" if missing else f"which does not import ({first_line(e)})"
        raise UserError(f"{what} needs transformer_lens, {why}: {INSTALL}") from None
    return transformer_lens


def to_transformer_lens(model: torch.nn.Module, meta: dict | None = None, tokenizer=None, bos: int | None = None):
    """TransformerLens's TransformerBridge of `model`: its Transformers twin (pretrained/twin.py, built in memory
    from the export's tables) with TransformerLens's hooks (`run_with_cache`, `hooks`, attention patterns, ...).
    Its logits are the model's own. Give it the run's token ids (run.encode(text)); `tokenizer`, a Transformers
    tokenizer, lets it read text itself (bridge.to_tokens), with the BOS handling TransformerLens gives it. `bos`:
    the id an encoder-decoder's decoder starts from in the run (its data's), the twin's decoder start.

    Built with TransformerLens's loader-agnostic builder (transformer_lens.model_bridge.sources
    .build_bridge_from_module), not TransformerBridge.boot_transformers: given a model in memory (hf_model=),
    boot_transformers still fetches a tokenizer by the model's name from the hub unless one is passed, and a run
    may have no tokenizer Transformers reads (modular's vocabulary). The builder asks nothing of the hub.

    Refused in one line: transformer_lens not installed; a model no Transformers family here expresses (its
    class, or each setting each candidate family lacks: pretrained/twin.py family_for); a twin whose architecture
    TransformerLens has no bridge for (a bert classifier's BertForSequenceClassification)."""
    what = "to_transformer_lens"
    transformer_lens(what)
    # (upstream: github.com/TransformerLensOrg/TransformerLens, transformer_lens/model_bridge/sources/
    # _bridge_builder.py and factories/architecture_adapter_factory.py; tests/unit/test_lens.py fails if they move)
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES
    from transformer_lens.model_bridge.sources import build_bridge_from_module

    from transformer_lab.pretrained.twin import transformers_twin

    twin = transformers_twin(model, meta, what, bos)
    architecture = type(twin).__name__
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise UserError(
            f"{what}: TransformerLens {version('transformer-lens')} has no bridge for {architecture}, this "
            f"{type(model).__name__}'s Transformers architecture; activations() reads its modules"
        )
    twin.to(next(model.parameters()).device)
    if twin.config.is_encoder_decoder:
        twin.register_forward_pre_hook(decoder_input_given, with_kwargs=True)
    return build_bridge_from_module(twin, architecture, hf_config=twin.config, tokenizer=tokenizer)


def decoder_input_given(twin, args, kwargs):
    """An encoder-decoder's bridge called without `decoder_input`: TransformerLens then feeds the decoder the source
    shifted right, whose logits look fine and mean nothing (upstream: github.com/TransformerLensOrg/TransformerLens,
    transformer_lens/model_bridge/transformer_bridge.py, "Auto-generate decoder_input_ids"; tests/unit/test_lens.py
    fails if it changes). Refused in one line, as is a decoder input that is not a tensor of ids: the decoder reads
    what the run's decoder reads, its <bos> (the twin's decoder start) and the target."""
    source, decoder = kwargs.get("input_ids", args[0] if args else None), kwargs.get("decoder_input_ids")
    start = twin.config.decoder_start_token_id  # (the run's <bos>, where the twin was given it)
    right = f"decoder_input=torch.tensor([[{start}, *target_ids]])"
    if decoder is not None and not (isinstance(decoder, torch.Tensor) and decoder.dim() == 2):
        what = f"a {decoder.dim()}-d tensor" if isinstance(decoder, torch.Tensor) else type(decoder).__name__
        raise UserError(f"to_transformer_lens: {right} (batch, target), a tensor of the run's ids; got {what}")
    if not isinstance(source, torch.Tensor) or decoder is None or decoder.shape != source.shape:
        return None
    if (decoder[:, 0] == start).all() and torch.equal(decoder[:, 1:], source[:, :-1]):
        raise UserError(
            "to_transformer_lens: an encoder-decoder's bridge needs the decoder's input, as the run decodes: "
            f"bridge(source, {right}) (<bos> first; without it TransformerLens feeds the decoder the source shifted "
            "right)"
        )
    return None


def activations(
    model: torch.nn.Module, *inputs, modules: Iterable[str] | None = None, **kwargs
) -> dict[str, torch.Tensor]:
    """The output of every named submodule of `model` (or of those `modules` names) in one forward pass,
    `model(*inputs, **kwargs)` under torch.no_grad, keyed by module name (model.named_modules()'s). A module
    whose output is a tuple, list or dict gives each tensor in it under NAME.INDEX or NAME.KEY; a module called
    more than once in the pass (an embedding the encoder and decoder share) gives its first call's under NAME,
    the next ones' under NAME#1, NAME#2, ...; an output that is not a tensor, and a container the pass never
    calls (an nn.ModuleList), give none.

    By PyTorch's forward hooks (register_forward_hook), not nnsight: hooks see every nn.Module, ours and a
    user's own alike, need nothing installed and no tracing of the forward pass; they are removed when the pass
    ends, an exception included."""
    named = dict(model.named_modules())
    named.pop("", None)  # (the model's own output is what it returns)
    wanted = list(named) if modules is None else list(modules)
    unknown = [name for name in wanted if name not in named]
    if unknown:
        some = ", ".join(list(named)[:6]) + (", ..." if len(named) > 6 else "")
        raise UserError(
            f"activations: {type(model).__name__} has no module {', '.join(map(repr, unknown))} (its modules: {some})"
        )
    cache: dict[str, torch.Tensor] = {}
    calls: dict[str, int] = {}

    def keep(name: str):
        def hook(module, args, output):
            n = calls[name] = calls.get(name, -1) + 1
            for key, tensor in tensors(name if n == 0 else f"{name}#{n}", output):
                cache[key] = tensor.detach()

        return hook

    handles = []
    try:
        for name in wanted:
            handles.append(named[name].register_forward_hook(keep(name)))
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return cache


def tensors(name: str, output) -> list[tuple[str, torch.Tensor]]:
    """(key, tensor) for each tensor of a module's output: NAME itself, or NAME.INDEX / NAME.KEY inside a tuple,
    list or dict (nested ones too)."""
    if isinstance(output, torch.Tensor):
        return [(name, output)]
    if isinstance(output, (tuple, list)):
        return [pair for i, item in enumerate(output) for pair in tensors(f"{name}.{i}", item)]
    if isinstance(output, dict):
        return [pair for key, item in output.items() for pair in tensors(f"{name}.{key}", item)]
    return []
