"""A Transformers checkpoint into a run: its family and our model's settings (open_checkpoint), those settings
applied to the run's config (apply), and its tensors loaded into our model (load_state)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_lab.config.schema import MODELS as OPTIONS
from transformer_lab.errors import ConfigError, first_line
from transformer_lab.pretrained.bert import Bert
from transformer_lab.pretrained.gpt2 import GPT2
from transformer_lab.pretrained.hub import (
    check_safetensors,
    local_dir,
    read_bin,
    read_config,
    read_tensors,
    refuse,
    require_pretrained,
    weight_files,
)
from transformer_lab.pretrained.llama import Llama, Qwen2
from transformer_lab.pretrained.marian import Marian
from transformer_lab.pretrained.t5 import T5
from transformer_lab.pretrained.tables import Family

log = logging.getLogger(__name__)

# our conf/model option -> its class (a family loads into that class, whatever a YAML calls it)
MODELS = {option: target for option, (target, _) in OPTIONS.items()}

FAMILIES: dict[str, Family] = {
    f.model_type: f for f in (GPT2(), Llama(), Llama("mistral", "MistralForCausalLM"), Qwen2(), Bert(), T5(), Marian())
}


def family_of(hf: dict, source: str) -> Family:
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        raise refuse(source, f"model_type {model_type!r} is not one mapped here ({', '.join(FAMILIES)})")
    return FAMILIES[model_type]


@dataclass
class Checkpoint:
    """What `init_from=hf:...` brings: the directory, its family and our model's settings."""

    source: str
    folder: Path
    family: Family
    settings: dict

    @property
    def tokenizer(self) -> str | None:
        return str(self.folder) if (self.folder / "tokenizer.json").is_file() else None


def open_checkpoint(source: str) -> Checkpoint:
    folder = local_dir(source)
    try:
        hf = read_config(folder)
    except ValueError as e:
        raise refuse(source, f"{folder / 'config.json'} is not JSON ({e})") from None
    if not isinstance(hf, dict):
        raise refuse(source, f"{folder / 'config.json'} holds a {type(hf).__name__}, not a model's settings")
    family = family_of(hf, source)
    try:
        return Checkpoint(source, folder, family, family.settings(hf, source))
    except KeyError as e:
        raise refuse(source, f"its config.json has no {e.args[0]} (a {family.model_type} config needs it)") from None


def override_value(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_tokenizer(cfg, checkpoint: Checkpoint) -> None:
    """The checkpoint's embedding rows mean its own tokenizer's pieces: a run reads its text with that tokenizer
    (the checkpoint's tokenizer.json, or one the user names where it has none), never with one learned here
    (ids would then mean other pieces). A named tokenizer must fit the embedding: no more ids than its rows,
    and no fewer than 99% of them (checkpoints pad their embeddings to a round number, by < 1%)."""
    from transformer_lab.data.configs import LEARNED_KINDS

    source = checkpoint.source
    if "tokenizer" not in cfg.data:
        raise refuse(
            source,
            f"data={cfg.data.name} reads text with a vocabulary of its own (no data.tokenizer), under which the "
            "checkpoint's embeddings would mean other pieces: fine-tune on data=text, labelled or translation, "
            "which read text with the checkpoint's tokenizer",
        )
    rows = checkpoint.settings.get("vocab_size")
    if checkpoint.tokenizer is not None:
        own = Path(checkpoint.tokenizer) / "tokenizer.json"
        try:
            from tokenizers import Tokenizer

            size = Tokenizer.from_file(str(own)).get_vocab_size()
        except Exception as e:  # noqa: BLE001  (the library's own errors: not JSON, not a tokenizer)
            raise refuse(source, f"{own} does not load as a tokenizer ({first_line(e)})") from None
        if rows is not None and size > rows:
            raise refuse(source, f"{own} has {size:,} ids, its embedding {rows:,} rows: they are not one model's")
        return
    named = cfg.data.tokenizer
    if named is None or named in LEARNED_KINDS:
        raise refuse(
            source,
            f"{checkpoint.folder} has no tokenizer.json, and data.tokenizer={named} would read text with a "
            "tokenizer made here, under which the checkpoint's embeddings mean other pieces: name the checkpoint's "
            "own tokenizer with data.tokenizer=FILE_OR_NAME (a tokenizer.json or a Hugging Face name)",
        )
    from transformer_lab.data.tokenizers import pretrained

    size = pretrained(named, "</s>").tokenizer.get_vocab_size()
    if rows is not None and not 0.99 * rows <= size <= rows:
        raise ConfigError(
            "data.tokenizer",
            f"{named} has {size:,} ids, {source}'s embedding {rows:,} rows: not the checkpoint's tokenizer "
            "(its ids would mean other pieces, or fall outside the embedding)",
        )


def apply(cfg, overrides: list[str] | None):
    """The run's config and overrides with its init_from=hf:... checkpoint's model settings (and, for data with
    a `tokenizer` key, the checkpoint's tokenizer): sizes are never retyped, and an override that says
    otherwise is refused by name. The settings join the overrides, so a resume composes the same model."""
    from omegaconf import OmegaConf, open_dict

    source = cfg.init_from
    checkpoint = open_checkpoint(source)
    files = weight_files(checkpoint.folder)
    if any(f.suffix == ".safetensors" for f in files):
        require_pretrained(f"init_from={source}")
    for path in files:  # whole, before the run starts (read_tensors reads them once it has)
        if path.suffix == ".safetensors":
            check_safetensors(path, source)
        else:
            read_bin(path, mmap=True)
    family = checkpoint.family
    if cfg.model.get("_target_") != MODELS[family.model]:
        raise refuse(
            source,
            f"a {family.model_type} checkpoint loads into model={family.model}; this run has model={cfg.model.name}",
        )
    from transformer_lab.data.configs import DATA_DECIDED

    given = {o.lstrip("+~").split("=", 1)[0] for o in overrides or []}
    added = []  # (in place: Hydra records and runs this config object)
    sizes = {k: v for k, v in checkpoint.settings.items() if k in DATA_DECIDED and v is not None}
    with open_dict(cfg):
        for key, value in checkpoint.settings.items():
            if key in DATA_DECIDED:
                continue
            if f"model.{key}" in given and OmegaConf.to_container(cfg.model, enum_to_str=True)[key] != value:
                raise ConfigError(
                    f"model.{key}", f"{source} has {key}={value}: leave model.{key} out (init_from sets the model)"
                )
            cfg.model[key] = value
            added.append(f"model.{key}={override_value(value)}")
        cfg.model_sizes = sizes  # the data's sizes give way to the checkpoint's (run.build.build_model checks them)
        added.append("model_sizes={" + ",".join(f"{k}:{v}" for k, v in sizes.items()) + "}")
        tokenizer = checkpoint.tokenizer
        check_tokenizer(cfg, checkpoint)
        if tokenizer and "tokenizer" in cfg.data:
            named = Path(str(cfg.data.tokenizer)).resolve()
            if "data.tokenizer" in given and named not in (
                Path(tokenizer).resolve(),
                Path(tokenizer, "tokenizer.json").resolve(),
            ):
                raise ConfigError(
                    "data.tokenizer",
                    f"init_from={source} reads text with its own tokenizer ({tokenizer}): leave data.tokenizer out",
                )
            cfg.data.tokenizer = tokenizer
            added.append(f"data.tokenizer={tokenizer}")
    log.info(
        "init_from %s: a %s checkpoint, model=%s with %s", source, family.model_type, family.model, ", ".join(added)
    )
    return cfg, [o for o in overrides or [] if o.split("=", 1)[0] not in {a.split("=", 1)[0] for a in added}] + added


def load_state(model: torch.nn.Module, source: str) -> tuple[str, list[str], set[str]]:
    """init_weights for `hf:...`: the checkpoint's tensors under our names, loaded where they fit. Returns the
    report, what did not fit (left as initialised, then theirs unused) and what was loaded."""
    checkpoint = open_checkpoint(source)
    settings = {**vars(model.config), **checkpoint.settings}
    theirs = read_tensors(checkpoint.folder)
    mapped = checkpoint.family.to_ours(theirs, settings)
    ours = model.state_dict()
    if model.config.__dict__.get("tie_weights") and "lm_head.weight" in ours:
        embedding = next(k for k in ("wte.weight", "embed.weight") if k in ours)
        if embedding in mapped:
            mapped["lm_head.weight"] = mapped[embedding]
    fits = {k: v.to(ours[k].dtype) for k, v in mapped.items() if k in ours and ours[k].shape == v.shape}
    wrong = sorted(k for k in mapped if k in ours and k not in fits and not k.startswith("head."))  # (a new head)
    if wrong:
        k = wrong[0]
        raise refuse(source, f"{k} is {tuple(mapped[k].shape)} in the checkpoint, {tuple(ours[k].shape)} in this model")
    model.load_state_dict(fits, strict=False)
    used = {t for e in checkpoint.family.table(settings) if e.ours in fits for t in e.theirs}
    unused = sorted(k for k in theirs if k not in used and not k.endswith(IGNORED))
    left = sorted(set(ours) - set(fits))
    report = f"init_from {source} ({checkpoint.family.model_type}, {checkpoint.folder}): loaded {len(fits)} of {len(ours)} tensors"
    if left:
        report += f"; left as initialised ({len(left)}): {', '.join(left)}"
    if unused:
        report += f"; not in this model ({len(unused)}): {', '.join(unused[:8])}{' ...' if len(unused) > 8 else ''}"
    return report, left + unused, set(fits)


# Tensors that are not weights (buffers), or are already counted (tied copies, BERT's folded token types)
IGNORED = (
    "attn.bias",
    "attn.masked_bias",
    "position_ids",
    "token_type_embeddings.weight",
    "embed_positions.weight",
    "final_logits_bias",
    "embed_tokens.weight",
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
    "lm_head.weight",
    "rotary_emb.inv_freq",
)
