"""A class a config names by its dotted path (`_target_`, `task.metrics`, `task.batches`): the one importer, used
by the checks, the build and the callbacks alike."""

from __future__ import annotations

import importlib

from transformer_lab.errors import ConfigError


def import_class(path, key: str, base: type | None = None) -> type:
    """The class a config names by its dotted path (a subclass of `base`, where given); a ConfigError naming
    `key` where it cannot be imported or is not one."""
    module, _, name = str(path).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as e:  # noqa: BLE001  (an import can fail in any way: a missing module, its own error)
        raise ConfigError(key, f"cannot import {path!r}: {e}") from None
    if not isinstance(cls, type) or (base is not None and not issubclass(cls, base)):
        what = f"a subclass of {base.__module__}.{base.__qualname__}" if base is not None else "a class"
        raise ConfigError(key, f"{path!r} is not {what}")
    return cls
