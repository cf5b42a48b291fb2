"""The values a setting may take: one of a few (`choice`: a config field typed with one of these enums fails
while Hydra composes the config when given anything else, and the message lists the choices), or a number
within bounds (`within`, checked by `check_ranges`; `check_number`, the one message for a number out of bounds,
for a config's settings and the API's options alike)."""

from __future__ import annotations

import dataclasses
import math
from enum import Enum

from transformer_lab.errors import require


class Choice(str, Enum):
    """An enum whose members are their own names and compare equal to them ("rope" == GPTPositions.rope)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def choice(name: str, *values: str) -> type[Choice]:
    """choice("Norm", "layernorm", "none"): an enum of those strings (names need not be identifiers)."""
    return Choice(name, [(value, value) for value in values], module=__name__)


def within(default, interval: str):
    """A settings dataclass's field whose value lies in `interval`, in interval notation ("(0, 1)", "[1, inf)": a
    finite number); checked by `check_ranges`. An integer field (by its annotation) takes integers only, and an
    optional one null."""
    return dataclasses.field(default=default, metadata={"within": interval})


def check_ranges(settings) -> None:
    """Every `within` field of a settings dataclass in its interval, or a ConfigError naming it (first in each
    __post_init__: the checks after it may rely on them)."""
    for f in dataclasses.fields(settings):
        if "within" in f.metadata:
            kind = str(f.type)  # ("int | None", "Optional[float]": the annotation as written)
            nullable = "None" in kind or "Optional" in kind
            check_number(f.name, getattr(settings, f.name), "int" in kind, f.metadata["within"], nullable)


def check_choice(key: str, value, choices) -> None:
    """One of `choices`, or the one message for every choice, naming `key` and listing them."""
    require(value in choices, key, f"must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_flag(key: str, value) -> None:
    """True or false (not 1, 2 or "yes"), or the one message for every flag, naming `key`."""
    require(isinstance(value, bool), key, f"must be true or false, got {value!r}")


def check_number(key: str, value, integer: bool, interval: str | None = None, nullable: bool = False) -> None:
    """A number (`integer`: an int) finite and within 64 bits (Python's API takes what no command line gives:
    nan, 2**70) and in `interval` (None: any), or null where `nullable`; else one line naming `key`."""
    if value is None and nullable:
        return
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and abs(value) < 2**63
    where = ""
    if interval is not None:
        low, high = (end.strip() for end in interval[1:-1].split(","))
        ok = ok and (float(low) < value if interval[0] == "(" else float(low) <= value)
        ok = ok and (value < float(high) if interval[-1] == ")" else value <= float(high))
        where = f" {'>' if interval[0] == '(' else '>='} {low}" if high == "inf" else f" in {interval}"
    what = "an integer" if integer else "a number"
    require(ok, key, f"must be {what}{where}{' or null' if nullable else ''}, got {value!r}")
