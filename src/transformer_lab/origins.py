"""Where a run's configs and code came from, kept in its checkpoints so that every command works on the run
from its directory alone: the config search path (`hydra.searchpath`, made absolute) and, for each class a
`_target_` named outside this package and the installed libraries, the folder it was imported from (its
code root). A command on a checkpoint puts those folders back on the import path (and on PYTHONPATH, for the
processes a run starts) and composes the run's config with its search path; one that is gone is one line."""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_lab.errors import UserError

OWN = Path(__file__).resolve().parent  # this package: never a user's root
LIBRARIES = {Path(p).resolve() for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
SEARCHPATH = "hydra.searchpath"


def searchpath_override(searchpath) -> list[str]:
    """`hydra.searchpath=[...]` with each file:// entry absolute (as from the directory this command runs in),
    or nothing for an empty search path."""
    entries = []
    for entry in searchpath or ():
        entry = str(entry)
        if entry.startswith("file://"):
            entry = "file://" + str(Path(entry.removeprefix("file://")).absolute())
        entries.append(entry)
    return [f"{SEARCHPATH}=[{','.join(entries)}]"] if entries else []


def targets(config: DictConfig | dict) -> list[str]:
    """Every class path a config names: `_target_` values, and a task's batch transforms and metrics."""
    found: list[str] = []

    def walk(node, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and (key == "_target_" or key in ("batches", "metrics")):
            found.append(node)

    plain = OmegaConf.to_container(config, resolve=False) if isinstance(config, DictConfig) else config
    walk(plain, "")
    task = plain.get("task") or {}
    for section in ("batches", "metrics"):
        for value in (task.get(section) or {}).values():
            found.extend(value if isinstance(value, list) else [value])
    return found


def code_roots(config: DictConfig | dict) -> dict[str, str]:
    """The top-level module of each class the config names that was imported from a folder of the user's
    (not this package, not an installed library) -> that folder."""
    roots = {}
    for target in targets(config):
        top = str(target).split(".")[0]
        module = sys.modules.get(top)
        file = getattr(module, "__file__", None)
        if not top or file is None or top in roots:
            continue
        path = Path(file).resolve()
        root = path.parent.parent if path.name == "__init__.py" else path.parent
        if not (path.is_relative_to(OWN) or any(path.is_relative_to(lib) for lib in LIBRARIES)):
            roots[top] = str(root)
    return roots


def restore_code(meta: dict, source: str) -> None:
    """The code roots a checkpoint records, put first on the import path (and PYTHONPATH) where its modules
    are not importable already; one missing, and its module found nowhere else, is one line naming it."""
    for module, root in (meta.get("code_roots") or {}).items():
        if Path(root).is_dir():
            if root not in sys.path:
                sys.path.insert(0, root)
                importlib.invalidate_caches()
                os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        elif importlib.util.find_spec(module) is None:
            raise UserError(
                f"{source}: its run imported `{module}` from {root}, which is missing: put it back, or make "
                f"`{module}` importable (PYTHONPATH)"
            )


def recorded_searchpath(overrides: list[str] | None, source: str) -> list[str]:
    """The search path a run's overrides record, each folder of it checked to exist."""
    for override in overrides or ():
        key, _, value = override.partition("=")
        if key.lstrip("+") != SEARCHPATH:
            continue
        for entry in value.strip("[]").split(","):
            entry = entry.strip().strip("'\"")
            if entry.startswith("file://") and not Path(entry.removeprefix("file://")).is_dir():
                raise UserError(
                    f"{source}: its run found its config groups in {entry.removeprefix('file://')} "
                    f"({SEARCHPATH}), which is missing: put it back, or give {SEARCHPATH}=[file://DIR] with them"
                )
    return [o for o in overrides or () if o.split("=", 1)[0].lstrip("+") == SEARCHPATH]


def with_searchpath(overrides: list[str], given: list[str]) -> list[str]:
    """A run's overrides, its recorded search path replaced by one this command gives."""
    theirs = [o for o in given if o.split("=", 1)[0].lstrip("+") == SEARCHPATH]
    return [o for o in overrides if not (theirs and o.split("=", 1)[0].lstrip("+") == SEARCHPATH)]
