"""Compare runs without a server: a table of what differs between runs and their results, and plots.

    python -m transformer_lab compare outputs/2026-11-22/*            # run directories
    python -m transformer_lab compare multirun/2026-11-22/10-00-00    # a sweep: every run under it
    python -m transformer_lab compare RUNS... sort=val/acc descending=true metrics=val/acc,train/loss
    python -m transformer_lab compare RUNS... group_by=optim.lr       # mean ± std per learning rate, n seeds
    python -m transformer_lab compare RUNS... plot=train/loss,val/acc logx=true out=curves.png label=optim.lr

A run directory is one with a summary.json (one without, still training or killed before writing it, is left out
with a warning naming it). The table shows the settings that differ between the runs'
resolved configs (.hydra/config.yaml: a default that differs counts as much as an override; settings
that only name the run's own directory are left out), then their results; a table wider than the
terminal (100 columns when not one) is turned so that each run is a column, in groups that fit.
`group_by=KEY[,KEY]`: one row per value of those settings, each metric as mean ± std (the sample standard
deviation, n - 1) over its runs, and n, their number. A group whose runs differ in length (summary.json's
global_step, or trainer.max_steps: a run a resume took further, one stopped early) is averaged with a warning
that names each length and its runs. What only says how a run was started or resumed (ckpt_path, overwrite,
init_strict, hydra.*) is no setting here: never shown, grouped by or in a label.

Curves come from metrics.jsonl. Runs that differ only in their seeds (`seed`, `*.seed`) are one line, the
mean at each step, with a band: `band=std` (mean ± sample std, the default), `band=minmax` (the lowest
to the highest run) or `band=none` (the mean alone); a group's label ends in its number of runs. Labels
hold the settings that vary across the groups (a setting that only follows another, as data.seed follows
seed, is left out), or those `label=KEY[,KEY]` names. The plot goes to compare.png in the current folder
unless `out=FILE` says where (a read never writes into a run).
"""

from __future__ import annotations

import math
import shutil
import sys

from transformer_lab.api.runs import (
    RunDir,
    chosen_metrics,
    differing_keys,
    found,
    groups_by,
    in_order,
    label,
    label_keys,
)
from transformer_lab.choices import check_choice, check_flag
from transformer_lab.commands import cli
from transformer_lab.commands.plots import check_logged, cut, is_number, mean_std, plot, plot_file
from transformer_lab.config.schema import is_seed
from transformer_lab.errors import UserError


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return "-" if value is None else str(value)


def table(runs: list[RunDir], metrics: list[str], sort: str | None, descending: bool) -> list[list[str]]:
    """Header and rows: the run, the differing settings, the metrics (transformer_lab.runs()'s, as text)."""
    keys = differing_keys(runs)
    rows = [
        [str(r.path), *(r.settings.get(k, "-") for k in keys), *(fmt(r.summary.get(m)) for m in metrics)]
        for r in in_order(runs, sort, descending)
    ]
    return [["run", *keys, *metrics], *rows]


def render(rows: list[list[str]], width: int = 100) -> str:
    """Runs as rows; wider than `width`, runs as columns (#1, #2, ... named above), as many as fit."""
    lines = _aligned(rows)
    if max(len(line) for line in lines) <= width:
        return "\n".join(lines)
    header, runs = rows[0], [[row[0], *(cut(cell) for cell in row[1:])] for row in rows[1:]]
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


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def seed_groups(runs: list[RunDir]) -> list[tuple[str, list[RunDir]]]:
    """Runs that differ only in their seeds, together, labelled by the settings that vary across groups."""
    return groups_by(runs, [k for k in differing_keys(runs) if not is_seed(k)])


def grouped_table(runs: list[RunDir], keys: list[str], metrics: list[str], sort: str | None, descending: bool):
    """Header and rows for group_by: the keys' values, n, and each metric's mean ± std over the group."""
    rows = []
    for _, members in groups_by(runs, keys):
        cells, order = [], None
        for metric in metrics:
            values = [r.summary[metric] for r in members if is_number(r.summary.get(metric))]
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


def plot_groups(runs: list[RunDir], group_by: list[str], labels: list[str]) -> list[tuple[str, list[RunDir]]]:
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


def _name(members: list[RunDir]) -> str:
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
        check_flag(key, options[key])
    check_choice("band", options["band"], BANDS)
    if options["out"] is not None and not options["plot"]:
        raise UserError("out: is where the plot goes: give plot=METRIC,... with it")
    runs = found(options["paths"], warn)
    metrics, sort = chosen_metrics(runs, options["metrics"], options["sort"])
    width = shutil.get_terminal_size((100, 24)).columns
    group_by = label_keys(runs, options["group_by"], "group_by") if options["group_by"] else []
    if options["plot"]:
        out = plot_file(options["out"], runs)
        groups = plot_groups(runs, group_by, options["label"])
        check_logged(groups, options["plot"])
    if group_by:
        failed = [r for r in runs if r.summary.get("status") == "failed"]
        for run in failed:
            warn(f"{run.path} failed: left out of the groups' statistics")
        kept = [r for r in runs if r not in failed]
        for name, members in groups_by(kept, group_by):
            uneven = lengths(name, members)
            if uneven:
                warn(uneven)
            told = ("trainer.max_steps",) if uneven else ()  # (said in the line above)
            differ = [k for k in differing_keys(members) if not is_seed(k) and k not in told]
            if differ:
                warn(f"{name} pools runs that differ in {', '.join(differ[:4])}: add them to group_by to split them")
        numeric = [m for m in metrics if m != "status"]
        yield render(grouped_table(kept, group_by, numeric, sort, options["descending"]), width)
    else:
        for name, members in groups if options["plot"] else []:  # (a line is the mean of its runs)
            uneven = lengths(name, members)
            if uneven:
                warn(uneven)
        yield render(table(runs, metrics, sort, options["descending"]), width)
    if options["plot"]:
        yield f"plot: {plot(groups, options['plot'], out, options['logx'], options['band'])}"


def lengths(name: str, members: list[RunDir]) -> str | None:
    """One line where a group's runs differ in length (summary.json's global_step, or trainer.max_steps: a run
    a resume took further, one stopped early): each length and its runs, since their mean mixes metrics taken
    at different steps (a curve's mean ends where its shortest run does). None where they agree."""
    known = lambda v: v is not None and str(v) not in ("None", "-1")  # noqa: E731  (-1: no step limit)
    by_length: dict[tuple, list[str]] = {}
    for run in members:
        step, limit = run.summary.get("global_step"), run.settings.get("trainer.max_steps")
        by_length.setdefault((step if known(step) else None, limit if known(limit) else None), []).append(str(run.path))
    steps = {step for step, _ in by_length if step is not None}
    limits = {limit for _, limit in by_length if limit is not None}
    if len(steps) < 2 and len(limits) < 2:
        return None
    listing = "; ".join(
        f"step {fmt(step)}{f' of {limit}' if limit is not None else ''}: {', '.join(paths)}"
        for (step, limit), paths in sorted(by_length.items(), key=lambda item: (item[0][0] or 0, str(item[0][1])))
    )
    remedy = (
        "add trainer.max_steps to group_by to split them" if len(limits) > 1 else "their metrics are at different steps"
    )
    return f"{name} averages runs of different lengths ({listing}): {remedy}"


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


COMMAND = cli.Command("compare", __doc__, OPTIONS, compared, paths=("paths",), text=("sort", "band", "out"))


def main(argv: list[str] | None = None) -> int:
    cli.run_command("compare", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
