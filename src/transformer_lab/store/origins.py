"""Where a run's configs and code came from, kept in its checkpoints so that every command works on the run
from its directory alone: the config search path (`hydra.searchpath`, made absolute) and, for each class a
`_target_` named outside this package and the installed libraries, the folder it was imported from (its
code root). A command on a checkpoint puts those folders back on the import path (and on PYTHONPATH, for the
processes a run starts) and composes the run's config with its search path; one that is gone is one line."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import sysconfig
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_lab.errors import UserError

OWN = Path(__file__).resolve().parents[1]  # this package: never a user's root
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
    """The code roots a checkpoint records, put first on the import path (and PYTHONPATH), unless PYTHONPATH
    names another copy of a module; one missing, and its module found nowhere else, is one line naming it."""
    given = [Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for module, root in (meta.get("code_roots") or {}).items():
        spec = importlib.util.find_spec(module) if given else None
        if spec is not None and spec.origin and any(Path(spec.origin).resolve().is_relative_to(g) for g in given):
            continue  # (PYTHONPATH names another copy of it: that one)
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


def recorded_searchpath(overrides: list[str] | None, source: str | None) -> list[str]:
    """The search path a run's overrides record (`source`: the checkpoint), or this command gives (None),
    each folder of it checked to exist."""
    for override in overrides or ():
        key, _, value = override.partition("=")
        if key.lstrip("+") != SEARCHPATH:
            continue
        for entry in value.strip("[]").split(","):
            entry = entry.strip().strip("'\"")
            folder = entry.removeprefix("file://")
            if not entry.startswith("file://") or Path(folder).is_dir():
                continue
            if source is None:
                raise UserError(f"{SEARCHPATH}: {folder} is not a folder (of config groups: model/, data/, ...)")
            raise UserError(
                f"{source}: its run found its config groups in {folder} ({SEARCHPATH}), which is missing: put "
                f"it back, or give {SEARCHPATH}=[file://DIR] with them"
            )
    return [o for o in overrides or () if o.split("=", 1)[0].lstrip("+") == SEARCHPATH]


def with_searchpath(overrides: list[str], given: list[str]) -> list[str]:
    """A run's overrides, its recorded search path replaced by one this command gives."""
    theirs = [o for o in given if o.split("=", 1)[0].lstrip("+") == SEARCHPATH]
    return [o for o in overrides if not (theirs and o.split("=", 1)[0].lstrip("+") == SEARCHPATH)]


def root_dir(meta: dict, given: list[str]) -> list[str]:
    """`paths.root_dir=` the folder the run was started from (where paths.data_dir and `${paths.root_dir}/...`
    paths pointed), for a command on it from elsewhere; nothing where this command sets the paths, or where
    that folder is gone."""
    recorded = ((meta.get("config") or {}).get("paths") or {}).get("root_dir")
    if (
        not recorded
        or not Path(recorded).is_dir()
        or any(o.split("=", 1)[0].lstrip("+").startswith("paths.") for o in given)
    ):
        return []
    return [override("paths.root_dir", recorded)]


def run_overrides(meta: dict) -> list[str] | None:
    """The overrides the checkpoint's run was composed from (None: built without a command line), less those that
    only started it (the weights it was initialised from: a checkpoint of the run holds its own; overwrite=true)."""
    if meta.get("overrides") is None:
        return None
    return [o for o in meta["overrides"] if override_key(o) not in ("init_from", "init_strict", "overwrite")]


def override(key: str, value) -> str:
    """`key=value` as Hydra's command-line grammar reads it back: a value of other characters than a bare word's
    (a path with a space, an accent, a comma) quoted, so it is not read as a list, a sweep or a lexer error."""
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_/.:+@%-]*", text):
        return f"{key}={text}"
    quoted = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    quoted = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, quoted)  # (nor the closing quote escaped)
    return f"{key}='{quoted}'"


def typed_overrides(hydra) -> list[str]:
    """The command line's overrides as typed (Hydra's runtime config holds them as strings it would resolve: an
    interpolation in one, `seed=${oc.env:SEED}`, is the run's config's to resolve and to refuse, naming its key)."""
    return OmegaConf.to_container(hydra.overrides.task, resolve=False)


def override_key(override: str) -> str:
    """The key an override sets, without its `+` (add) or `~` (delete) prefix."""
    return override.split("=", 1)[0].lstrip("+~")
