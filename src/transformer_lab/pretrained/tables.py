"""What every family shares: its table of (our tensor, their tensors, how), read one way to load and the
other to export, the Family that holds one, and the refusals and activation names they use."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_lab.errors import ConfigError
from transformer_lab.pretrained.hub import refuse


@dataclass
class Entry:
    """Our tensor `ours` is their tensors `theirs`: copied ("copy"), transposed ("t": GPT-2's Conv1D), or
    stacked by rows ("cat": q, k, v into our in_proj)."""

    ours: str
    theirs: tuple[str, ...]
    how: str = "copy"
    kv_rows: int | None = None  # "cat" of q, k, v: the rows of k and of v, where fewer than q's (GQA)


def linear(ours: str, theirs: str, bias: bool, how: str = "copy") -> list[Entry]:
    entries = [Entry(f"{ours}.weight", (f"{theirs}.weight",), how)]
    return entries + ([Entry(f"{ours}.bias", (f"{theirs}.bias",))] if bias else [])


def fused(ours: str, theirs: list[str], bias: bool) -> list[Entry]:
    entries = [Entry(f"{ours}.weight", tuple(f"{t}.weight" for t in theirs), "cat")]
    return entries + ([Entry(f"{ours}.bias", tuple(f"{t}.bias" for t in theirs), "cat")] if bias else [])


def norm(ours: str, theirs: str, bias: bool = True) -> list[Entry]:
    return linear(ours, theirs, bias)


class Family:
    """One model_type of Transformers: `model` is our model's conf/model option; `settings` its settings
    from their config (a ConfigError where one has no counterpart here); `table` the tensors; `hf_config`
    their config from our settings (export; a ConfigError naming every setting it cannot express: refuse_export)."""

    model: str
    model_type: str

    def settings(self, hf: dict, source: str) -> dict:
        raise NotImplementedError

    def table(self, s: dict) -> list[Entry]:
        raise NotImplementedError

    def hf_config(self, s: dict, tokens: dict) -> dict:
        raise NotImplementedError

    def to_ours(self, theirs: dict, s: dict) -> dict:
        return from_table(self.table(s), theirs)

    def to_hf(self, ours: dict, s: dict) -> dict:
        return to_table(self.table(s), ours)

    def export_caveat(self, s: dict) -> str | None:
        """What a config.json of this family cannot hold of these settings exactly, said when exported (a twin
        in memory holds it: pretrained/twin.py same_norm_eps)."""
        return None


def from_table(table: list[Entry], theirs: dict) -> dict:
    out = {}
    for e in table:
        if all(t in theirs for t in e.theirs):
            parts = [theirs[t] for t in e.theirs]
            out[e.ours] = (
                parts[0].t().contiguous() if e.how == "t" else torch.cat(parts) if e.how == "cat" else parts[0]
            )
    return out


def to_table(table: list[Entry], ours: dict) -> dict:
    out = {}
    for e in table:
        if e.ours not in ours:
            continue
        v = ours[e.ours]
        if e.how == "cat":
            kv = e.kv_rows or len(v) // len(e.theirs)
            sizes = [len(v) - 2 * kv, kv, kv] if len(e.theirs) == 3 else [kv] * len(e.theirs)
            out.update(zip(e.theirs, (p.contiguous() for p in v.split(sizes))))
        else:
            out[e.theirs[0]] = v.t().contiguous() if e.how == "t" else v.contiguous()
    return out


def qkv(ours: str, theirs: list[str], bias: bool, kv_rows: int | None = None) -> list[Entry]:
    """q, k, v stacked by rows into our in_proj (kv_rows: the rows of k and of v, where fewer than q's)."""
    return [Entry(e.ours, e.theirs, e.how, kv_rows) for e in fused(ours, theirs, bias)]


def refuse_unless(condition: bool, source: str, what: str) -> None:
    if not condition:
        raise refuse(source, what)


def shown(value) -> str:
    """A setting's value as the command line writes it (null, true, false)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def differ(s: dict, wanted: dict) -> list[tuple[str, str]]:
    """(key, what the family has) for each of `wanted`'s settings this model has otherwise."""
    return [(key, f"model.{key}={shown(w)} (this model: {shown(s[key])})") for key, w in wanted.items() if s[key] != w]


def lacks(s: dict, key: str, what: str, off=None) -> list[tuple[str, str]]:
    """(key, "no WHAT") where this model has `key` on (other than `off`): what the family has not at all."""
    return [(key, f"no {what} (this model: model.{key}={shown(s[key])})")] if s.get(key, off) != off else []


def options_on(s: dict) -> list[tuple[str, str]]:
    """gpt's speedrun options no Transformers family has (NOT_IN_TRANSFORMERS), each that this model has on."""
    return [m for key, off in NOT_IN_TRANSFORMERS.items() for m in lacks(s, key, NOT_IN_TRANSFORMERS_NAMES[key], off)]


def refuse_export(family: str, mismatches: list[tuple[str, str]]) -> None:
    """Every setting of this model that `family` cannot express, named at once (one retraining changes them
    all): `mismatches` as differ(), lacks() and options_on() give them. Nothing where there is none."""
    if mismatches:
        raise ConfigError(f"model.{mismatches[0][0]}", f"{family} has " + ", ".join(what for _, what in mismatches))


ACT_TO_OURS = {
    "gelu_new": "gelu-tanh",
    "gelu_pytorch_tanh": "gelu-tanh",
    "gelu": "gelu",
    "relu": "relu",
    "relu2": "relu2",
}
ACT_TO_HF = {"gelu-tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "relu2": "relu2", "silu": "swish"}

# gpt's speedrun options that neither GPT-2 nor a Llama has, as they are when off: a model with one on does not
# export (options_on names each); a checkpoint loads with them off, as it loads with its own weights (not
# zero-initialised ones), so an override turning one of LOADED_OFF on with init_from=hf: is refused by name.
NOT_IN_TRANSFORMERS = {"qk_norm": False, "logit_softcap": None}
NOT_IN_TRANSFORMERS_NAMES = {"qk_norm": "QK-norm", "logit_softcap": "logit soft-capping"}
LOADED_OFF = {**NOT_IN_TRANSFORMERS, "zero_init_projections": False}
