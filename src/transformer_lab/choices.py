"""Settings that take one of a few values. A config field typed with one of these enums fails while Hydra
composes the config when given anything else, and the message lists the choices."""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """An enum whose members are their own names and compare equal to them ("rope" == GPTPositions.rope)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def choice(name: str, *values: str) -> type[Choice]:
    """choice("Norm", "layernorm", "none"): an enum of those strings (names need not be identifiers)."""
    return Choice(name, [(value, value) for value in values], module=__name__)
