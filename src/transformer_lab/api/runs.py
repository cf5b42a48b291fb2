"""Run directories as `transformer_lab.runs(...)` and the compare command read them: each one's summary, resolved
settings and history; which settings tell them apart and which metrics they have. `runs()` gives compare's table
as a pandas DataFrame (a row a run, or a group of runs with group_by: each metric's mean, std and n)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from transformer_lab.choices import check_flag
from transformer_lab.config.schema import is_seed  # noqa: F401 (and the resolvers of .hydra/config.yaml: ${suggested:...})
from transformer_lab.errors import UserError
from transformer_lab.store.files import BadFile, read_json, read_jsonl, read_text
from transformer_lab.store.rundir import DISCARDED, OVERWRITTEN, RUN_FILES, readable

# Settings that only say how a run was started or resumed (the checkpoint it resumed, whether it made room for
# itself, whether init_from had to fit whole), not what it trained: compare never shows, groups or labels runs
# by them (a resumed run is the run it continues). init_from stays: the weights a run started from are its own.
STARTED = ("ckpt_path", "overwrite", "init_strict")


def how_started(key: str) -> bool:
    """Whether `key` only says how a run was started or resumed (STARTED, and Hydra's own hydra.*)."""
    return key in STARTED or key.startswith("hydra.")


@dataclass
class RunDir:
    """A run directory: its summary.json, its resolved settings (key -> text), its metrics.jsonl on demand."""

    path: Path
    summary: dict
    settings: dict[str, str] = field(default_factory=dict)  # the resolved config, flattened

    def history(self) -> list[dict]:
        path = self.path / "metrics.jsonl"
        return read_jsonl(path) if path.exists() else []


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


def find_runs(paths: list[str]) -> list[RunDir]:
    """The runs under `paths`: a run an overwrite=true set aside (not yet training, or killed) is read where it is,
    RUN/.overwritten, while RUN holds no summary of the run replacing it."""
    runs, seen = [], set()
    for path in map(Path, paths):
        top = readable(path / "summary.json")
        for summary in sorted([top] if top.exists() else path.rglob("summary.json")):
            replaced = summary.parent.name == OVERWRITTEN and (summary.parent.parent / "summary.json").exists()
            replaced = replaced or DISCARDED in summary.parts  # (a started run's predecessor, being deleted)
            if not replaced and summary.parent.resolve() not in seen:  # (each run once)
                seen.add(summary.parent.resolve())
                runs.append(RunDir(summary.parent, read_json(summary), resolved_settings(summary.parent)))
    return runs


def differing_keys(runs: list[RunDir]) -> list[str]:
    keys = sorted({k for r in runs for k in r.settings})
    return [k for k in keys if len({r.settings.get(k) for r in runs}) > 1]


# The metrics a table shows when none are named: those of them any run has.
DEFAULT_METRICS = (
    "val/loss",
    "val/loss_best",
    "val/acc",
    "val/acc_best",
    "val/bleu_best",
    "test/bleu",
    "train/loss",
    "global_step",
    "wall_time_s",
    "status",
)


def unsummarised(paths: list[str]) -> list[Path]:
    """The run directories under `paths` that have no summary.json (yet): a run still training, or one whose
    process was killed before it wrote one (its metrics.jsonl or checkpoints are there)."""
    scanned = [path for path in map(Path, paths) if not (path / "summary.json").exists()]  # (a run: itself alone)
    marks = [p for path in scanned for name in RUN_FILES[1:] for p in [path / name, *path.rglob(name)]]
    return sorted(
        {
            m.parent
            for m in marks
            if m.exists()
            and not {OVERWRITTEN, DISCARDED} & set(m.parts)
            and not readable(m.parent / "summary.json").exists()
        }
    )


def found(paths, warn: Callable[[str], None]) -> list[RunDir]:
    """The runs under `paths` (one path or several), or one line saying there are none; `warn` is told, in one
    line, of the run directories left out for want of a summary.json."""
    paths = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    if not paths:
        raise UserError("which runs? python -m transformer_lab compare RUN_DIR_OR_SWEEP ... (--help)")
    if missing := [p for p in paths if not Path(p).exists()]:
        raise UserError(f"{' '.join(missing)}: no such file or directory")
    runs, unfinished = find_runs(paths), unsummarised(paths)
    left_out = unfinished and (
        f"{len(unfinished)} run director{'y' if len(unfinished) == 1 else 'ies'} without a summary.json (still "
        f"training, or killed before writing one): {', '.join(map(str, unfinished[:4]))}"
        f"{f' and {len(unfinished) - 4} more' if len(unfinished) > 4 else ''}"
    )
    if not runs:
        if files := [p for p in paths if Path(p).is_file()]:
            raise UserError(f"{' '.join(files)}: a file, not a run directory or sweep (give the folder of its run)")
        none = f"no run directories (with a summary.json) under {' '.join(paths)}"
        raise UserError(f"{none}; {left_out}" if left_out else none)
    if left_out:
        warn(f"left out {left_out}")
    held = [Path(r.path).resolve() for r in runs] + [Path(u).resolve() for u in unfinished]
    if empty := [p for p in paths if not any(h == Path(p).resolve() or Path(p).resolve() in h.parents for h in held)]:
        warn(f"left out {' '.join(empty)}: no run directory (with a summary.json) there")  # (none dropped unsaid)
    return runs


def chosen_metrics(runs: list[RunDir], metrics: list[str], sort: str | None) -> tuple[list[str], str | None]:
    """(the metrics shown: those named, else DEFAULT_METRICS any run has; the metric sorted by: `sort`, else
    val/loss where a run has it), each named one checked against the runs' summaries."""
    present = sorted({m for r in runs for m in r.summary})
    for key, metric in [*(("metrics", m) for m in metrics), *([("sort", sort)] if sort else [])]:
        if metric not in present:
            raise UserError(f"{key}: no run's summary.json has {metric} (they have: {', '.join(present)})")
    shown = list(metrics) or [m for m in DEFAULT_METRICS if any(m in r.summary for r in runs)]
    return shown, sort or ("val/loss" if any("val/loss" in r.summary for r in runs) else None)


def in_order(runs: list[RunDir], sort: str | None, descending: bool) -> list[RunDir]:
    """The runs by `sort`'s value (those without it last), else as found."""
    if not sort:
        return runs
    missing = [r for r in runs if not isinstance(r.summary.get(sort), (int, float))]
    present = sorted((r for r in runs if r not in missing), key=lambda r: r.summary[sort], reverse=descending)
    return present + missing


def value(text: str):
    """A setting's text as the value it was (a number, true/false, null), or the text."""
    import yaml

    if text in ("None", "null"):  # (a resolved config's None, written as text)
        return None
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return parsed if isinstance(parsed, (int, float, bool)) or parsed is None else text


def label(run: RunDir, keys: list[str]) -> str:
    return " ".join(f"{k}={run.settings[k]}" for k in keys if k in run.settings) or run.path.name


def label_keys(runs: list[RunDir], chosen: list[str] | None = None, option: str = "label") -> list[str]:
    """The settings that tell the runs' groups apart: those that differ, less the seeds, and less a setting
    whose values only follow another's (callbacks.long_run.model follows model.name): the one every run has,
    an option's name, or the shorter name stays."""
    if chosen:
        started = [k for k in chosen if how_started(k)]
        if started:
            raise UserError(
                f"{option}: {started[0]} only says how a run was started or resumed, not what it trained: "
                "choose a setting of the runs' .hydra/config.yaml that does"
            )
        unknown = [k for k in chosen if not any(k in r.settings for r in runs)]
        if unknown:
            metric = " (a metric: sort= orders by it)" if any(unknown[0] in r.summary for r in runs) else ""
            raise UserError(f"{option}: no run has the setting {unknown[0]!r} (.hydra/config.yaml){metric}")
        return list(chosen)
    kept: list[str] = []
    seen: set[tuple] = set()

    def rank(key: str) -> tuple:  # a key every run has first, then an option's name (model.name), then the shortest
        section = key.split(".")[0]
        order = ("model", "data", "task").index(section) if section in ("model", "data", "task") else 3
        return (
            any(key not in r.settings for r in runs),
            not key.endswith(".name"),
            key.count("."),
            order,
            len(key),
            key,
        )

    for key in sorted((k for k in differing_keys(runs) if not is_seed(k)), key=rank):
        partition = _partition(runs, key)
        if partition not in seen:
            seen.add(partition)
            kept.append(key)
    return sorted(kept)


def _partition(runs: list[RunDir], key: str) -> tuple:
    """Which runs share a value of `key`: the runs' indices grouped, independent of the values themselves."""
    groups: dict[str | None, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(run.settings.get(key), []).append(i)
    return tuple(sorted(tuple(g) for g in groups.values()))


def groups_by(runs: list[RunDir], keys: list[str]) -> list[tuple[str, list[RunDir]]]:
    """The runs grouped by their values of `keys`, in the order first seen; each group's label."""
    groups: dict[tuple, list[RunDir]] = {}
    for run in runs:
        groups.setdefault(tuple(run.settings.get(k) for k in keys), []).append(run)
    return [(label(members[0], keys) if keys else "all runs", members) for members in groups.values()]


def runs(paths, group_by=None, metrics=None, sort: str | None = None, descending: bool = False):
    """compare's table as a DataFrame: a row a run ("run": its directory), a column per setting that differs
    between the runs (as values: 0.001, not "0.001") and per metric. `group_by` (a key or keys): a row per
    value of them, with each metric's mean and sample std over its runs ("val/loss mean", "val/loss std") and
    "n", the failed runs left out, as `compare group_by=...` does."""
    import pandas as pd

    if paths is None or not isinstance(paths, (str, Path, list, tuple)):
        raise UserError(f"runs: a run directory or sweep, or a list of them, got {type(paths).__name__}")
    metrics, group_by = ([metrics] if isinstance(metrics, str) else metrics), (group_by or None)
    for key, given in (("group_by", group_by), ("metrics", metrics)):
        names = [given] if isinstance(given, str) else given
        if given is not None and not (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)):
            raise UserError(f"{key}: a key or a list of keys, got {given!r}")
    check_flag("descending", descending)
    if sort is not None and not isinstance(sort, str):
        raise UserError(f"sort: a metric's name, got {sort!r}")
    all_runs = found(paths, lambda message: warnings.warn(message, stacklevel=3))
    metrics, sort = chosen_metrics(all_runs, list(metrics or []), sort)
    if group_by:
        keys = label_keys(all_runs, [group_by] if isinstance(group_by, str) else list(group_by), "group_by")
        kept = [r for r in all_runs if r.summary.get("status") != "failed"]
        numeric = [m for m in metrics if m != "status"]
        rows = []
        for _, members in groups_by(kept, keys):
            row = {k: value(members[0].settings[k]) if k in members[0].settings else None for k in keys}
            for metric in numeric:
                values = pd.Series([r.summary.get(metric) for r in members], dtype="object")
                values = pd.to_numeric(values[values.map(lambda v: isinstance(v, (int, float)))], errors="coerce")
                std = values.std(ddof=1) if len(values) != 1 else 0.0  # (a run alone: 0, as compare's ± 0)
                row[f"{metric} mean"], row[f"{metric} std"] = values.mean(), std
            row["n"] = len(members)
            rows.append(row)
        frame = pd.DataFrame(rows, columns=[*keys, *(f"{m} {s}" for m in numeric for s in ("mean", "std")), "n"])
        if sort:
            frame = frame.sort_values(f"{sort} mean", ascending=not descending, na_position="last", kind="stable")
        return frame.reset_index(drop=True)
    keys = differing_keys(all_runs)
    rows = [
        {
            "run": str(r.path),
            **{k: value(r.settings[k]) if k in r.settings else None for k in keys},
            **{m: r.summary.get(m) for m in metrics},
        }
        for r in in_order(all_runs, sort, descending)
    ]
    return pd.DataFrame(rows, columns=["run", *keys, *metrics])
