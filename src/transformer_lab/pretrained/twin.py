"""A run's model as Transformers sees it: its settings (`settings_of`), the family that can express them
(`family_for`) and its Transformers twin (`transformers_twin`), the model `export` would write built in memory
from the same tables, with the run's weights. TransformerLens opens the twin (api/lens.py)."""

from __future__ import annotations

from enum import Enum

import torch

from transformer_lab.errors import ConfigError, UserError
from transformer_lab.pretrained.hub import imported


def settings_of(model: torch.nn.Module) -> dict:
    """Our model's settings (its config's fields, enums as their values); none for a model without a config
    object (a user's own: family_for then refuses it by its class)."""
    config = getattr(model, "config", None)
    fields = vars(config) if hasattr(config, "__dict__") else {}
    return {k: v.value if isinstance(v, Enum) else v for k, v in fields.items()}


def family_for(model: torch.nn.Module, s: dict, what: str = "export"):
    """The Transformers family this model's settings are: the first of its candidates that can express them;
    where none can, one line (starting with `what`, the command or function asking) naming, for each
    candidate, every setting it cannot express."""
    from transformer_lab.pretrained.llama import llama_for
    from transformer_lab.pretrained.load import FAMILIES, MODELS

    target = f"{type(model).__module__}.{type(model).__qualname__}"
    candidates = [
        f for f in FAMILIES.values() if MODELS[f.model] == target and f.model_type not in ("mistral", "qwen2")
    ]
    candidates = [llama_for(s) if f.model_type == "llama" else f for f in candidates]
    if not candidates:
        raise UserError(f"{what}: {target} has no Transformers family here (pretrained/: {', '.join(FAMILIES)})")
    reasons = []
    for family in candidates:
        try:
            family.hf_config(s, {})
            return family
        except ConfigError as e:
            reasons.append(e.message)
    raise UserError(f"{what}: no Transformers architecture has this model's settings: {'; '.join(reasons)}")


def transformers_twin(
    model: torch.nn.Module, meta: dict | None = None, what: str = "transformers_twin", bos: int | None = None
):
    """The Transformers model (a PreTrainedModel, in eval mode, float32, on the CPU) that computes what `model`
    computes: the config and tensors `export` writes (family.hf_config, family.to_hf), built in memory, no file
    written and no hub asked. `meta` (the checkpoint's record) names a classifier's classes as its data did; `bos`,
    the id an encoder-decoder's decoder starts from in the run (its data's), is the twin's decoder start.
    Attention is eager (Transformers' own softmax, not SDPA's kernel), the one TransformerLens hooks."""
    from transformer_lab.pretrained.load import IGNORED

    transformers = imported("transformers", what)
    s = settings_of(model)
    family = family_for(model, s, what)
    start = {"decoder_start_token_id": bos} if bos is not None and model.architecture == "encoder-decoder" else {}
    config = {"model_type": family.model_type, **family.hf_config(s, start)}
    if config.get("num_labels"):
        labels = (meta or {}).get("labels")
        names = [str(label) for label in labels] if labels else [str(i) for i in range(config["num_labels"])]
        config["id2label"], config["label2id"] = dict(enumerate(names)), {name: i for i, name in enumerate(names)}
    architecture = config["architectures"][0]
    hf_config = transformers.AutoConfig.for_model(**config, attn_implementation="eager")
    twin = getattr(transformers, architecture)(hf_config).to(torch.float32)
    ours = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    tensors = family.to_hf(ours, s)
    untie_output_embedding(twin, tensors)
    missing, unexpected = twin.load_state_dict(tensors, strict=False)
    # A tied copy (the LM head of a tied embedding, T5's per-stack embeddings) is not in the table: Transformers
    # shares it with the tensor it is tied to; nor are what is no weight (Marian's sinusoids, GPT-2's mask:
    # load.py IGNORED). Anything else the table left out would keep its random initialisation, and a tensor
    # two of the table's share would hold only one of them.
    tied = set(tied_keys(twin))
    untouched = sorted(k for k in missing if k not in tied and not k.endswith(IGNORED))
    state = twin.state_dict()
    overwritten = sorted(k for k, v in tensors.items() if k in state and not torch.equal(state[k], v))
    if untouched or unexpected or overwritten:
        raise RuntimeError(
            f"{family.model_type}'s table does not fill {architecture}: left {untouched}, unknown {unexpected}, "
            f"overwritten {overwritten}"
        )
    same_norm_eps(model, twin, [e for e in family.table(s) if e.ours in ours])
    return twin.eval()


def untie_output_embedding(twin, tensors: dict) -> None:
    """The twin's LM head made its own where the table has one apart from the embedding (our untied models)
    but Transformers ties them anyway: Transformers 5's T5 always ties (its config's tie_word_embeddings=false
    now means only an unscaled output, T5.1.1's), which a model in memory need not."""
    head, embedding = twin.get_output_embeddings(), twin.get_input_embeddings()
    name = next((n for n, m in twin.named_modules() if m is head), None)
    if head is not None and f"{name}.weight" in tensors and head.weight is embedding.weight:
        head.weight = torch.nn.Parameter(head.weight.detach().clone())


def same_norm_eps(model: torch.nn.Module, twin, table) -> None:
    """Each of the twin's norms with the epsilon of ours it was copied from: a config.json has one epsilon
    for all (BERT's layer_norm_eps), where our bert with model.norm_eps=null has 1e-12 in its embedding and head
    norms and 1e-5 in its layers (export warns of it); a model in memory can have both."""
    for entry in table:
        if entry.how != "copy" or not entry.ours.endswith(".weight"):
            continue
        ours = model.get_submodule(entry.ours.removesuffix(".weight"))
        theirs = twin.get_submodule(entry.theirs[0].removesuffix(".weight"))
        if isinstance(getattr(ours, "eps", None), float):
            for name in ("eps", "variance_epsilon"):  # (torch's and Transformers' norms; Llama's, T5's)
                if isinstance(getattr(theirs, name, None), float):
                    setattr(theirs, name, ours.eps)


def tied_keys(twin) -> list[str]:
    """The parameters Transformers ties to another (`_tied_weights_keys`: a dict of tied -> source in
    Transformers 5, a list of names in 4), under the twin's own names (its submodules' included)."""
    keys = []
    for prefix, module in twin.named_modules():
        tied = getattr(module, "_tied_weights_keys", None) or {}
        keys += [f"{prefix}.{k}" if prefix else k for k in tied]
    return keys
