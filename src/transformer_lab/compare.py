"""Compare runs without a server: a table of what differs between runs and their results, and plots.

    python -m transformer_lab.compare outputs/2026-11-22/*            # run directories
    python -m transformer_lab.compare multirun/2026-11-22/10-00-00    # a sweep: every run under it
    python -m transformer_lab.compare RUNS... --sort val/acc --metrics val/acc train/loss
    python -m transformer_lab.compare RUNS... --plot train/acc val/acc --logx --out curves.png

A run directory is one with a summary.json. The table shows the settings that differ between the runs'
resolved configs (.hydra/config.yaml: a default that differs counts as much as an override; settings
that only name the run's own directory are left out), then their results; a table wider than the
terminal (100 columns when not one) is turned so that each run is a column, in groups that fit. Curves
come from metrics.jsonl; the plot goes to the first run's directory unless --out says where.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import transformer_lab.config  # noqa: F401  (the resolvers of .hydra/config.yaml: ${suggested:...})
from transformer_lab.callbacks.history import read_history
from transformer_lab.errors import UserError, exit_on_user_error
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
    """The run's composed config (.hydra/config.yaml) resolved, as `key: value` text, less what names
    the run's own directory. Hydra's `${hydra:...}` values are read from .hydra/hydra.yaml."""
    from omegaconf import OmegaConf

    config_file, hydra_file = run_dir / ".hydra" / "config.yaml", run_dir / ".hydra" / "hydra.yaml"
    if not config_file.exists():
        return {}
    config = hydra_record(config_file, lambda text: text.replace("${hydra:", "${hydra."))
    if hydra_file.exists():
        config.hydra = {"runtime": hydra_record(hydra_file).hydra.runtime}  # what ${hydra:runtime.*} reads
    try:
        values = OmegaConf.to_container(config, resolve=True)
    except Exception:  # noqa: BLE001  (an interpolation these files cannot resolve: shown as written)
        values = OmegaConf.to_container(config)
    flat: dict[str, str] = {}

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif str(run_dir.resolve()) not in str(value):
                flat[f"{prefix}{key}"] = str(value)

    walk(values, "")
    # (`_target_` says again what the option's name says)
    return {k: v for k, v in flat.items() if not k.startswith("hydra.") and not k.endswith("._target_")}


def find_runs(paths: list[str]) -> list[Run]:
    """The runs under `paths`; a run an unfinished overwrite=true set aside is put back first (rundir.recover),
    and what such a run set aside is not a run of its own."""
    runs = []
    for path in map(Path, paths):
        for run_dir in [path, *(p.parent.parent for p in path.rglob(f"{OVERWRITTEN}/summary.json"))]:
            recover(run_dir)
        for summary in sorted(
            [path / "summary.json"] if (path / "summary.json").exists() else path.rglob("summary.json")
        ):
            if OVERWRITTEN not in summary.parts:
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


def plot(runs: list[Run], metrics: list[str], out: Path, logx: bool = False) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    keys = differing_keys(runs)
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(5 * len(metrics), 3.8 + 0.25 * len(runs) * (len(runs) > 1)), squeeze=False
    )
    for ax, metric in zip(axes[0], metrics):
        for i, run in enumerate(runs):
            points = [(r["step"], r[metric]) for r in run.history() if metric in r]
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, color=f"C{i % 10}", marker="o" if len(points) < 30 else None, markersize=3)
        ax.set_title(metric)
        ax.set_xlabel("step")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    if len(runs) > 1:  # one legend for all panels, under them
        handles = [plt.Line2D([], [], color=f"C{i % 10}") for i in range(len(runs))]
        fig.legend(
            handles, [label(r, keys)[:100] for r in runs], loc="lower center", fontsize="small", ncol=1, frameon=False
        )
        fig.subplots_adjust(bottom=0.18 + 0.05 * len(runs), wspace=0.3)
    else:
        fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer_lab.compare", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="run directories, or directories holding runs (a sweep)")
    parser.add_argument("--metrics", nargs="+", help="summary.json keys to show (default: the common ones present)")
    parser.add_argument("--sort", help="sort by this metric (default: val/loss when present)")
    parser.add_argument("--descending", action="store_true", help="largest first (e.g. for val/acc, test/bleu)")
    parser.add_argument("--plot", nargs="+", metavar="METRIC", help="plot these metrics against step")
    parser.add_argument("--logx", action="store_true", help="logarithmic step axis")
    parser.add_argument("--out", help="where the plot goes (default: compare.png in the first run's directory)")
    args = parser.parse_args(argv)
    with exit_on_user_error():  # a summary.json or metrics.jsonl that is not what it claims: one line
        return compare(args)


def compare(args: argparse.Namespace) -> int:
    runs = find_runs(args.paths)
    if not runs:
        print(f"error: no run directories (with a summary.json) under {' '.join(args.paths)}", file=sys.stderr)
        return 2
    metrics = args.metrics or [m for m in DEFAULT_METRICS if any(m in r.summary for r in runs)]
    sort = args.sort or ("val/loss" if any("val/loss" in r.summary for r in runs) else None)
    print(render(table(runs, metrics, sort, args.descending), shutil.get_terminal_size((100, 24)).columns))
    if args.plot:
        out = Path(args.out) if args.out else runs[0].path / "compare.png"
        print(f"plot: {plot(runs, args.plot, out, args.logx)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
