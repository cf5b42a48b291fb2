"""Compare runs without a server: a table of what differs between runs and their results, and plots.

    python -m transformer_lab compare outputs/2026-11-22/*            # run directories
    python -m transformer_lab compare multirun/2026-11-22/10-00-00    # a sweep: every run under it
    python -m transformer_lab compare RUNS... sort=val/acc descending=true metrics=val/acc,train/loss
    python -m transformer_lab compare RUNS... group_by=optim.lr       # mean ± std per learning rate, n seeds
    python -m transformer_lab compare RUNS... plot=train/loss,val/acc logx=true out=curves.png label=optim.lr

A run directory is one with a summary.json. The table shows the settings that differ between the runs'
resolved configs (.hydra/config.yaml: a default that differs counts as much as an override; settings
that only name the run's own directory are left out), then their results; a table wider than the
terminal (100 columns when not one) is turned so that each run is a column, in groups that fit.
`group_by=KEY[,KEY]`: one row per value of those settings, each metric as mean ± std (the sample standard
deviation, n - 1) over its runs, and n, their number.

Curves come from metrics.jsonl. Runs that differ only in their seeds (`seed`, `*.seed`) are one line, the
mean at each step, with a band: `band=std` (mean ± sample std, the default), `band=minmax` (the lowest
to the highest run) or `band=none` (the mean alone); a group's label ends in its number of runs. Labels
hold the settings that vary across the groups (a setting that only follows another, as data.seed follows
seed, is left out), or those `label=KEY[,KEY]` names. The plot goes to the first run's directory unless
`out=FILE` says where.
"""

from __future__ import annotations

import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformer_lab import cli
from transformer_lab.callbacks.history import read_history
from transformer_lab.config import is_seed  # (and the resolvers of .hydra/config.yaml: ${suggested:...})
from transformer_lab.errors import UserError
from transformer_lab.files import BadFile, read_json, read_text
from transformer_lab.rundir import OVERWRITTEN, recover

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
    as `key: value` text, less what names the run's own directory. Hydra's `${hydra:...}` values are read from .hydra/hydra.yaml."""
    from omegaconf import OmegaConf

    records = [p.parent for p in (run_dir / ".hydra").glob("**/config.yaml")]
    if not records:
        return {}
    # the newest record: a resumed run's (.hydra/TIME/, its settings as composed again: resume.record_config)
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
    return {k: v for k, v in flat.items() if not k.startswith("hydra.") and not k.endswith("._target_")}


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


def label(run: Run, keys: list[str]) -> str:
    return " ".join(f"{k}={run.settings[k]}" for k in keys if k in run.settings) or run.path.name


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return "-" if value is None else str(value)


def table(runs: list[Run], metrics: list[str], sort: str | None, descending: bool) -> list[list[str]]:
    """Header and rows: the run, the differing settings, the metrics."""
    keys = differing_keys(runs)
    if sort:
        missing = [r for r in runs if not isinstance(r.summary.get(sort), (int, float))]
        present = sorted((r for r in runs if r not in missing), key=lambda r: r.summary[sort], reverse=descending)
        runs = present + missing
    header = ["run", *keys, *metrics]
    rows = [
        [str(r.path), *(r.settings.get(k, "-") for k in keys), *(fmt(r.summary.get(m)) for m in metrics)] for r in runs
    ]
    return [header, *rows]


def render(rows: list[list[str]], width: int = 100) -> str:
    """Runs as rows; wider than `width`, runs as columns (#1, #2, ... named above), as many as fit."""
    lines = _aligned(rows)
    if max(len(line) for line in lines) <= width:
        return "\n".join(lines)
    header, runs = rows[0], [[row[0], *(_cut(cell) for cell in row[1:])] for row in rows[1:]]
    out = [f"#{i}  {row[0]}" for i, row in enumerate(runs, 1)]
    names = header[1:]
    name_width = max(len(n) for n in names)
    per_group = max(1, (width - name_width) // (max(len(c) for row in runs for c in row[1:]) + 2))
    for start in range(0, len(runs), per_group):
        group = runs[start : start + per_group]
        turned = [["", *(f"#{start + i}" for i in range(1, len(group) + 1))]]
        turned += [[name, *(row[j + 1] for row in group)] for j, name in enumerate(names)]
        out += ["", *_aligned(turned)]
    return "\n".join(out)


def _cut(cell: str, limit: int = 24) -> str:
    return cell if len(cell) <= limit else cell[: limit - 1] + "…"


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def label_keys(runs: list[Run], chosen: list[str] | None = None, option: str = "label") -> list[str]:
    """The settings that tell the runs' groups apart: those that differ, less the seeds, and less a setting
    whose values only follow another's (callbacks.long_run.model follows model.name): the one every run has,
    an option's name, or the shorter name stays."""
    if chosen:
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


def _partition(runs: list[Run], key: str) -> tuple:
    """Which runs share a value of `key`: the runs' indices grouped, independent of the values themselves."""
    groups: dict[str | None, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(run.settings.get(key), []).append(i)
    return tuple(sorted(tuple(g) for g in groups.values()))


def groups_by(runs: list[Run], keys: list[str]) -> list[tuple[str, list[Run]]]:
    """The runs grouped by their values of `keys`, in the order first seen; each group's label."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run.settings.get(k) for k in keys), []).append(run)
    return [(label(members[0], keys) if keys else "all runs", members) for members in groups.values()]


def seed_groups(runs: list[Run]) -> list[tuple[str, list[Run]]]:
    """Runs that differ only in their seeds, together, labelled by the settings that vary across groups."""
    return groups_by(runs, [k for k in differing_keys(runs) if not is_seed(k)])


def mean_std(values: list[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1; 0 for one value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def grouped_table(runs: list[Run], keys: list[str], metrics: list[str], sort: str | None, descending: bool):
    """Header and rows for group_by: the keys' values, n, and each metric's mean ± std over the group."""
    rows = []
    for _, members in groups_by(runs, keys):
        cells, order = [], None
        for metric in metrics:
            values = [r.summary[metric] for r in members if _number(r.summary.get(metric))]
            if not values:
                cells.append("-")
                continue
            mean, std = mean_std(values)
            cells.append(f"{fmt(mean)} ± {fmt(std)}" + (f" ({len(values)})" if len(values) < len(members) else ""))
            if metric == sort:
                order = mean
        rows.append(([members[0].settings.get(k, "-") for k in keys], len(members), cells, order))
    if sort:
        rows.sort(key=lambda row: (row[3] is None, -(row[3] or 0) if descending else (row[3] or 0)))
    return [[*keys, "n", *metrics], *[[*values, str(n), *cells] for values, n, cells, _ in rows]]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def curve(members: list[Run], metric: str) -> tuple[list[int], list[list[float]]]:
    """A group's curve of `metric`: the steps every member logged it at, and the members' values there."""
    histories = [{r["step"]: r[metric] for r in run.history() if _number(r.get(metric))} for run in members]
    steps = sorted(set.intersection(*(set(h) for h in histories))) if histories else []
    return steps, [[h[s] for h in histories] for s in steps]


def plot(
    groups: list[tuple[str, list[Run]]], metrics: list[str], out: Path, logx: bool = False, band: str = "std"
) -> Path:
    """One panel per metric, one line per group (the mean of its runs at each step) with its band."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.8), squeeze=False)
    style = lambda i: {"color": f"C{i % 10}", "linestyle": ("-", "--", ":", "-.")[i // 10 % 4]}  # noqa: E731
    for ax, metric in zip(axes[0], metrics):
        drawn = 0
        for i, (_, members) in enumerate(groups):
            steps, values = curve(members, metric)
            if not steps:
                continue
            drawn += 1
            mean = [sum(v) / len(v) for v in values]
            ax.plot(steps, mean, marker="o" if len(steps) < 30 else None, markersize=3, **style(i))
            if len(members) > 1 and band != "none":
                if band == "std":
                    spread = [mean_std(v)[1] for v in values]
                    low, high = [m - s for m, s in zip(mean, spread)], [m + s for m, s in zip(mean, spread)]
                else:
                    low, high = [min(v) for v in values], [max(v) for v in values]
                ax.fill_between(steps, low, high, color=style(i)["color"], alpha=0.2, linewidth=0)
        if not drawn:
            logged = sorted({k for _, m in groups for r in m for row in r.history() for k in row} - {"step", "epoch"})
            plt.close(fig)
            raise UserError(
                f"plot: no run logged {metric} (their metrics.jsonl have: {', '.join(logged) or 'nothing'})"
            )
        ax.set_title(metric)
        ax.set_xlabel("step")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    if len(groups) > 1 or any(len(m) > 1 for _, m in groups):  # one legend for all panels, under them
        what = {"std": "mean ± std", "minmax": "mean, min–max", "none": "mean"}[band]
        names = [
            _cut(name, 80) + (f"  ({len(members)} runs, {what})" if len(members) > 1 else "")
            for name, members in groups
        ]
        handles = [plt.Line2D([], [], **style(i)) for i in range(len(groups))]
        columns = max(1, min(len(names), int(5 * len(metrics) * 110 / (7 * max(len(n) for n in names) + 60))))
        fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize="small", ncol=columns,
                   frameon=False)  # fmt: skip
    fig.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, bbox_inches="tight")  # (the legend below the panels is kept whole)
    except OSError as e:
        raise UserError(f"out={out}: cannot write it ({e.strerror or e})") from None
    finally:
        plt.close(fig)
    return out


def plot_file(out: str | None, runs: list[Run]) -> Path:
    """Where the plot goes: out=FILE (a folder: its compare.png; no extension: .png), else the first run's
    directory; a file type matplotlib cannot write is refused before anything is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if out is None:
        return runs[0].path / "compare.png"
    path = Path(out)
    if path.is_dir():
        return path / "compare.png"
    if not path.suffix:
        return path.with_name(path.name + ".png")
    kinds = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if path.suffix[1:].lower() not in kinds:
        raise UserError(
            f"out={out}: matplotlib cannot write .{path.suffix[1:]} files; give one of: .{', .'.join(kinds)}"
        )
    return path


def plot_groups(runs: list[Run], group_by: list[str], labels: list[str]) -> list[tuple[str, list[Run]]]:
    """The plot's lines: runs grouped by group_by's settings, else those that differ only in seeds together;
    each labelled by the settings that tell the lines apart (label= chooses them, and must tell them apart)."""
    groups = groups_by(runs, group_by) if group_by else seed_groups(runs)
    keys = label_keys(runs, labels or group_by or None)
    named = [(label(members[0], keys) if keys else _name(members), members) for _, members in groups]
    names = [name for name, _ in named]
    if labels and len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise UserError(f"label: {twice} names more than one line: choose settings that tell them apart")
    return named


def _name(members: list[Run]) -> str:
    return members[0].path.name if len(members) == 1 else f"{members[0].path.parent.name}/*"


BANDS = ("std", "minmax", "none")
OPTIONS = {
    "paths": [],
    "metrics": [],
    "sort": None,
    "descending": False,
    "group_by": [],
    "plot": [],
    "band": "std",
    "label": [],
    "logx": False,
    "out": None,
}


def compared(args: dict):
    """The command: the table, and the plot where asked; every option checked before anything is printed."""
    options = {**OPTIONS, **args}
    for key in ("descending", "logx"):
        if not isinstance(options[key], bool):
            raise UserError(f"{key}: must be true or false, got {options[key]!r}")
    if options["band"] not in BANDS:
        raise UserError(f"band: must be one of {', '.join(BANDS)}, got {options['band']!r}")
    if not options["paths"]:
        raise UserError("which runs? python -m transformer_lab compare RUN_DIR_OR_SWEEP ... (--help)")
    if options["out"] is not None and not options["plot"]:
        raise UserError("out: is where the plot goes: give plot=METRIC,... with it")
    runs = find_runs(options["paths"])
    if not runs:
        raise UserError(f"no run directories (with a summary.json) under {' '.join(options['paths'])}")
    present = sorted({m for r in runs for m in r.summary})
    for key, metric in [
        *(("metrics", m) for m in options["metrics"]),
        *([("sort", options["sort"])] if options["sort"] else []),
    ]:
        if metric not in present:
            raise UserError(f"{key}: no run's summary.json has {metric} (they have: {', '.join(present)})")
    metrics = options["metrics"] or [m for m in DEFAULT_METRICS if any(m in r.summary for r in runs)]
    sort = options["sort"] or ("val/loss" if any("val/loss" in r.summary for r in runs) else None)
    width = shutil.get_terminal_size((100, 24)).columns
    group_by = label_keys(runs, options["group_by"], "group_by") if options["group_by"] else []
    if options["plot"]:
        out = plot_file(options["out"], runs)
        groups = plot_groups(runs, group_by, options["label"])
    if group_by:
        failed = [r for r in runs if r.summary.get("status") == "failed"]
        for run in failed:
            warn(f"{run.path} failed: left out of the groups' statistics")
        kept = [r for r in runs if r not in failed]
        for name, members in groups_by(kept, group_by):
            differ = [k for k in differing_keys(members) if not is_seed(k)]
            if differ:
                warn(f"{name} pools runs that differ in {', '.join(differ[:4])}: add them to group_by to split them")
        numeric = [m for m in metrics if m != "status"]
        yield render(grouped_table(kept, group_by, numeric, sort, options["descending"]), width)
    else:
        yield render(table(runs, metrics, sort, options["descending"]), width)
    if options["plot"]:
        yield f"plot: {plot(groups, options['plot'], out, options['logx'], options['band'])}"


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


COMMAND = cli.Command("compare", __doc__, OPTIONS, compared, paths=("paths",), text=("sort", "band", "out"))


def main(argv: list[str] | None = None) -> int:
    cli.run("compare", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
