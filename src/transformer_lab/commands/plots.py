"""The compare command's figure: one panel per metric, one line per group of runs with its band."""

from __future__ import annotations

import math
from pathlib import Path

from transformer_lab.api.runs import RunDir
from transformer_lab.errors import UserError
from transformer_lab.store.atomic import atomic_path, check_destination


def cut(cell: str, limit: int = 24) -> str:
    return cell if len(cell) <= limit else cell[: limit - 1] + "…"


def mean_std(values: list[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1; 0 for one value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def curve(members: list[RunDir], metric: str) -> tuple[list[int], list[list[float]]]:
    """A group's curve of `metric`: the steps every member logged it at, and the members' values there."""
    histories = [{r["step"]: r[metric] for r in run.history() if is_number(r.get(metric))} for run in members]
    steps = sorted(set.intersection(*(set(h) for h in histories))) if histories else []
    return steps, [[h[s] for h in histories] for s in steps]


def check_logged(groups: list[tuple[str, list[RunDir]]], metrics: list[str]) -> None:
    """Each metric to plot has a line: some group's runs all logged it (before anything is printed or drawn)."""
    for metric in metrics:
        if not any(curve(members, metric)[0] for _, members in groups):
            logged = sorted({k for _, m in groups for r in m for row in r.history() for k in row} - {"step", "epoch"})
            raise UserError(
                f"plot: no run logged {metric} (their metrics.jsonl have: {', '.join(logged) or 'nothing'})"
            )


def plot(
    groups: list[tuple[str, list[RunDir]]], metrics: list[str], out: Path, logx: bool = False, band: str = "std"
) -> Path:
    """One panel per metric, one line per group (the mean of its runs at each step) with its band."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.8), squeeze=False)
    style = lambda i: {"color": f"C{i % 10}", "linestyle": ("-", "--", ":", "-.")[i // 10 % 4]}  # noqa: E731
    for ax, metric in zip(axes[0], metrics):
        for i, (_, members) in enumerate(groups):
            steps, values = curve(members, metric)
            if not steps:
                continue
            mean = [sum(v) / len(v) for v in values]
            ax.plot(steps, mean, marker="o" if len(steps) < 30 else None, markersize=3, **style(i))
            if len(members) > 1 and band != "none":
                if band == "std":
                    spread = [mean_std(v)[1] for v in values]
                    low, high = [m - s for m, s in zip(mean, spread)], [m + s for m, s in zip(mean, spread)]
                else:
                    low, high = [min(v) for v in values], [max(v) for v in values]
                ax.fill_between(steps, low, high, color=style(i)["color"], alpha=0.2, linewidth=0)
        ax.set_title(metric)
        ax.set_xlabel("step")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    if len(groups) > 1 or any(len(m) > 1 for _, m in groups):  # one legend for all panels, under them
        what = {"std": "mean ± std", "minmax": "mean, min–max", "none": "mean"}[band]
        names = [
            cut(name, 80) + (f"  ({len(members)} runs, {what})" if len(members) > 1 else "") for name, members in groups
        ]
        handles = [plt.Line2D([], [], **style(i)) for i in range(len(groups))]
        columns = max(1, min(len(names), int(5 * len(metrics) * 110 / (7 * max(len(n) for n in names) + 60))))
        fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize="small", ncol=columns,
                   frameon=False)  # fmt: skip
    fig.tight_layout()
    try:  # (the one writer: a full disk leaves the earlier figure whole, and one line)
        with atomic_path(out, "out") as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format=out.suffix.lstrip(".") or "png")  # (legend whole)
    finally:
        plt.close(fig)
    return out


def plot_file(out: str | None, runs: list[RunDir]) -> Path:
    """Where the plot goes: out=FILE (a folder: its compare.png; no extension: .png), else compare.png in the
    current folder (a read never writes into a run); a file type matplotlib cannot write is refused before anything is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if out == "":
        raise UserError("out=: give a file name or a folder (the plot goes there)")
    path = Path("compare.png" if out is None else out)
    if path.is_dir():
        path = path / "compare.png"
    elif not path.suffix:
        path = path.with_name(path.name + ".png")
    kinds = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if path.suffix[1:].lower() not in kinds:
        raise UserError(
            f"out={out}: matplotlib cannot write .{path.suffix[1:]} files; give one of: .{', .'.join(kinds)}"
        )
    check_destination(path, f"out={out}" if out is not None else str(path))
    return path
