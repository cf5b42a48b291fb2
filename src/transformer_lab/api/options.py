"""The options of what a trained model does (generate, translate, fill, classify, answer, attention): each
checked against its default's kind, its minimum, and the device against torch's, whether it comes from Python
(api/run.py) or a command line (commands/)."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformer_lab.choices import check_flag, check_number
from transformer_lab.errors import ConfigError, UserError, require


def unknown_options(args: dict, defaults: dict) -> None:
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        raise UserError(f"unknown option(s) {unknown}; options: {', '.join(defaults)}")


def with_defaults(args: dict, defaults: dict, minimums: dict | None = None, nullable: tuple[str, ...] = ()) -> dict:
    """The options with their defaults, each checked against its default's type (an option whose default is
    None is text, or a number where `minimums` has one), its minimum and whether it may be null, and the
    device against torch's."""
    unknown_options(args, defaults)
    args = {**defaults, **args}
    for key, value in args.items():
        check_option(key, value, defaults[key], (minimums or {}).get(key), key in nullable)
    if "device" in args:
        check_device(args["device"])
    return args


def check_option(key: str, value, default, minimum: float | None, nullable: bool = False) -> None:
    """One option's value: of its default's kind, at least `minimum`, a number finite and within 64 bits (Python's
    API takes what no command line gives: nan, 2**70); text given explicitly is not empty, nor None for text."""
    if isinstance(default, bool):
        check_flag(key, value)
    elif isinstance(default, (int, float)) or (default is None and minimum is not None):
        integer = isinstance(default, int) and not isinstance(default, float)
        check_number(key, value, integer, None if minimum is None else f"[{minimum}, inf)", nullable or default is None)
    elif value is not None or isinstance(default, str):
        require(isinstance(value, str), key, f"must be text, got {value!r}")
        require(value != "", key, "is empty")


def check_device(device) -> None:
    """A device torch knows and this machine has: `cpu`, `cuda`, `cuda:N`, `mps`."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError("device", f"{device!r} is not a device; use cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        require(
            (parsed.index or 0) < count,
            "device",
            f"{device} asks for a CUDA GPU but torch sees {count or 'none'}; use device=cpu",
        )
    elif parsed.type == "mps":
        require(torch.backends.mps.is_available(), "device", "mps is not available on this machine; use device=cpu")
    else:
        require(parsed.type == "cpu", "device", f"{device!r}: only cpu, cuda, cuda:N or mps run the inference commands")


@dataclass(frozen=True)
class Options:
    """A verb's options: their defaults (the kind each must be), minimums, and those that may be null."""

    defaults: dict
    minimums: dict = field(default_factory=dict)
    nullable: tuple[str, ...] = ()

    def checked(self, given: dict) -> dict:
        return with_defaults(given, self.defaults, self.minimums, self.nullable)


GENERATE = Options(
    # prompt null: the run's own (its data.sample_prompt, what it sampled from while it trained)
    {"prompt": None, "max_new_tokens": 500, "num_samples": 1, "temperature": 0.8, "top_k": 200, "seed": 0},
    {"max_new_tokens": 1, "num_samples": 1, "temperature": 0, "top_k": 1, "seed": 0},
    nullable=("top_k", "prompt"),
)
TRANSLATE = Options(
    {"beam_size": 4, "length_penalty": 0.6, "max_extra_len": 50, "batch_size": 64},
    {"beam_size": 1, "length_penalty": 0, "max_extra_len": 1, "batch_size": 1},
)
FILL = Options({"max_len": 100, "spans": False, "batch_size": 64}, {"max_len": 1, "batch_size": 1})
CLASSIFY = Options({"top": 1, "batch_size": 256}, {"top": 1, "batch_size": 1})
ANSWER = {"max_len": None, "batch_size": 256}  # (api/answer.py checks them: max_len an integer or null)
