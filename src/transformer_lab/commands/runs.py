"""Run directories as the compare command reads them: each one's summary, resolved settings and history."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from transformer_lab.config.schema import is_seed  # noqa: F401 (and the resolvers of .hydra/config.yaml: ${suggested:...})
from transformer_lab.errors import UserError
from transformer_lab.store.files import BadFile, read_json, read_text
from transformer_lab.store.history import read_history
from transformer_lab.store.rundir import OVERWRITTEN, recover

# Settings that only say how a run was started or resumed (the checkpoint it resumed, whether it made room for
# itself, whether init_from had to fit whole), not what it trained: compare never shows, groups or labels runs
# by them (a resumed run is the run it continues). init_from stays: the weights a run started from are its own.
STARTED = ("ckpt_path", "overwrite", "init_strict")


def how_started(key: str) -> bool:
    """Whether `key` only says how a run was started or resumed (STARTED, and Hydra's own hydra.*)."""
    return key in STARTED or key.startswith("hydra.")


@dataclass
class Run:
    path: Path
    summary: dict
    settings: dict[str, str] = field(default_factory=dict)  # the resolved config, flattened

    def history(self) -> list[dict]:
        path = self.path / "metrics.jsonl"
        return read_history(path) if path.exists() else []


def hydra_record(path: Path, edit=lambda text: text):
    """One of Hydra's YAML files of a run (.hydra/config.yaml, hydra.yaml), or one line saying it is not one."""
    from omegaconf import OmegaConf

    try:
        record = OmegaConf.create(edit(read_text(path)))
    except UserError:
        raise
    except Exception:  # noqa: BLE001  (YAML's and OmegaConf's errors, of many types)
        record = None
    if not OmegaConf.is_dict(record) or (path.name == "hydra.yaml" and "runtime" not in record.get("hydra", {})):
        raise BadFile(path, "is not Hydra's YAML record of a run")
    return record


def resolved_settings(run_dir: Path) -> dict[str, str]:
    """The run's composed config (.hydra/config.yaml, or a resume's newer .hydra/TIME/config.yaml) resolved,
    as `key: value` text, less what names the run's own directory and what only says how it was started
    (how_started). Hydra's `${hydra:...}` values are read from .hydra/hydra.yaml."""
    from omegaconf import OmegaConf

    records = [p.parent for p in (run_dir / ".hydra").glob("**/config.yaml")]
    if not records:
        return {}
    # the newest record: a resumed run's (.hydra/TIME/, its settings as composed again: rundir.record)
    record = max(records, key=lambda p: (p / "config.yaml").stat().st_mtime)
    config_file, hydra_file = record / "config.yaml", record / "hydra.yaml"
    if not hydra_file.exists():
        hydra_file = run_dir / ".hydra" / "hydra.yaml"
    config = hydra_record(config_file, lambda text: text.replace("${hydra:", "${hydra."))
    if hydra_file.exists():
        config.hydra = {"runtime": hydra_record(hydra_file).hydra.runtime}  # what ${hydra:runtime.*} reads
    try:
        values = OmegaConf.to_container(config, resolve=True)
    except Exception:  # noqa: BLE001  (an interpolation these files cannot resolve: shown as written)
        values = OmegaConf.to_container(config)
    flat: dict[str, str] = {}
    # what names the run's own directory: where it is, and where it was made (a run moved or copied since)
    own = {str(run_dir.resolve()), str(((values.get("paths") or {}).get("output_dir")) or run_dir.resolve())}

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif not any(o in str(value) for o in own):
                flat[f"{prefix}{key}"] = str(value)

    walk(values, "")
    # (`_target_` says again what the option's name says)
    return {k: v for k, v in flat.items() if not how_started(k) and not k.endswith("._target_")}


def find_runs(paths: list[str]) -> list[Run]:
    """The runs under `paths`; a run an unfinished overwrite=true set aside is put back first (rundir.recover),
    and what such a run set aside is not a run of its own."""
    runs, seen = [], set()
    for path in map(Path, paths):
        for run_dir in [path, *(p.parent.parent for p in path.rglob(f"{OVERWRITTEN}/summary.json"))]:
            recover(run_dir)
        for summary in sorted(
            [path / "summary.json"] if (path / "summary.json").exists() else path.rglob("summary.json")
        ):
            if OVERWRITTEN not in summary.parts and summary.parent.resolve() not in seen:  # (each run once)
                seen.add(summary.parent.resolve())
                runs.append(Run(summary.parent, read_json(summary), resolved_settings(summary.parent)))
    return runs


def differing_keys(runs: list[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.settings})
    return [k for k in keys if len({r.settings.get(k) for r in runs}) > 1]
