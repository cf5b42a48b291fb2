"""The compare command: a table of differing overrides and results that matches summary.json, and plots.

Here: run directories written without training; tests/e2e/test_compare.py has the rest."""

import json
from pathlib import Path

import matplotlib.colors
import matplotlib.image
import pytest

from helpers.run_dirs import composed_yaml, fake_run


def test_table_shows_resolved_settings_that_differ_in_100_columns(tmp_path, capsys, monkeypatch):
    from transformer_lab.commands.compare import main

    runs = [
        fake_run(tmp_path / "defaults", ["data=modular"], 2.0),  # nothing overridden: modular's defaults
        fake_run(tmp_path / "preset", ["experiment=grokking"], 1.0),  # a preset's defaults
        fake_run(tmp_path / "small_p", ["data=modular", "data.p=11", "model.n_layer=1"], 3.0),
    ]
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)
    assert main([*map(str, runs), "plot=val/loss"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    settings = {line.split()[0]: line.split()[1:] for line in lines if line.startswith(("data.", "model.", "val/"))}
    # sorted by val/loss (preset, defaults, small_p); every run's own value, defaults included
    assert settings["val/loss"] == ["1", "2", "3"]
    assert settings["data.p"] == ["113", "97", "11"] and settings["model.n_layer"] == ["1", "2", "1"]
    assert settings["model.mlp"] == ["relu", "gelu", "gelu"]  # a default the preset changed
    assert "data.name" not in settings  # the same in all three
    assert not [line for line in lines if line.startswith(("paths.", "hydra.", "logger.", "callbacks.best"))]
    assert Path("compare.png").read_bytes().startswith(b"\x89PNG")  # into the current folder, never a run


def test_a_torn_metrics_line_is_left_out_and_a_broken_summary_is_one_line(tmp_path, capsys):
    """A run killed mid-write leaves half a line at the end of metrics.jsonl: the table and the plot use the
    rest. A summary.json that is not JSON, or a .hydra/config.yaml that is not YAML, is one `error:` line."""
    from transformer_lab.commands.compare import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"val/loss": 2.0, "global_step": 3, "status": "interrupted"}))
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "train/loss": 2.5}\n{"step": 2, "train/loss": 2.2}\n{"step": 3, "tr'
    )
    assert main([str(run), "plot=train/loss", f"out={tmp_path / 'plot.png'}"]) == 0
    assert (tmp_path / "plot.png").is_file() and "interrupted" in capsys.readouterr().out

    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("model: {n_layer: [1, 2\n")  # cut short
    with pytest.raises(SystemExit) as exit_:
        main([str(run)])
    assert capsys.readouterr().err == f"error: {run / '.hydra' / 'config.yaml'}: is not Hydra's YAML record of a run\n"

    (run / ".hydra" / "config.yaml").write_text("model: {n_layer: 2}\n")
    (run / "summary.json").write_text('{"val/loss": 2.0,\n "status": ')
    with pytest.raises(SystemExit) as exit_:
        main([str(run)])
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2 and err == f"error: {run / 'summary.json'}:2: is not JSON (Expecting value, column 12)\n"
    )


def test_group_by_gives_mean_and_sample_std_and_the_number_of_runs(seeded, capsys, monkeypatch):
    import statistics

    from transformer_lab.commands.compare import main

    monkeypatch.setenv("COLUMNS", "200")
    assert main([*map(str, seeded), "group_by=optim.lr", "metrics=val/loss,global_step"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["optim.lr", "n", "val/loss", "global_step"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    low = statistics.stdev([2.0, 2.5, 3.0])  # 0.5, by hand: sqrt(((-.5)^2 + 0 + .5^2) / 2)
    high = statistics.stdev([1.0, 1.4])
    assert rows["0.001"] == ["0.001", "3", "2.5", "±", f"{low:.4g}", "10", "±", "0"]
    assert rows["0.003"] == ["0.003", "2", "1.2", "±", f"{high:.4g}", "10", "±", "0"]
    assert list(rows) == ["0.003", "0.001"]  # sorted by the mean val/loss


def test_a_plot_draws_a_configuration_once_with_its_band_and_labels_only_what_varies(seeded, tmp_path):
    from transformer_lab.api.runs import RunDir, resolved_settings
    from transformer_lab.commands.compare import label_keys, seed_groups
    from transformer_lab.commands.plots import curve, mean_std

    runs = [RunDir(p, json.loads((p / "summary.json").read_text()), resolved_settings(p)) for p in seeded]
    # seed and data.seed (which follows it) differ, and optim.lr; only optim.lr tells the groups apart
    assert label_keys(runs) == ["optim.lr"]
    assert label_keys(runs, ["seed"]) == ["seed"]
    groups = seed_groups(runs)
    assert [(name, len(members)) for name, members in groups] == [("optim.lr=0.001", 3), ("optim.lr=0.003", 2)]
    steps, values = curve(groups[0][1], "val/loss")
    assert steps == [5, 10] and values[0] == [2.2, 2.7, 3.2]  # val_loss + 1/5 of each seed
    assert mean_std(values[0]) == pytest.approx((2.7, 0.5))

    out = tmp_path / "seeds.png"
    from transformer_lab.commands.compare import main

    assert main([*map(str, seeded), "plot=val/loss", f"out={out}", "band=minmax"]) == 0
    image = matplotlib.image.imread(out)[..., :3]
    legend = image[int(image.shape[0] * 0.85) :]  # under the panel: each group's line in the legend, whole
    for colour in ("C0", "C1"):
        assert (abs(legend - matplotlib.colors.to_rgb(colour)).max(-1) < 0.05).sum() > 20, colour
    for colour in ("C0", "C1"):  # two lines, not five, and each group's band in a paler shade of its colour
        rgb = matplotlib.colors.to_rgb(colour)
        assert (abs(image - rgb).max(-1) < 0.05).sum() > 100, colour
        pale = [0.8 * 1 + 0.2 * c for c in rgb]  # alpha 0.2 over white
        assert (abs(image - pale).max(-1) < 0.03).sum() > 100, colour
    assert (abs(image - matplotlib.colors.to_rgb("C2")).max(-1) < 0.05).sum() == 0  # no third line


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--plot", "val/loss"], "error: unknown flag '--plot': options are key=value; compare takes: paths,"),
        (["band=wide"], "error: band: must be one of std, minmax, none, got 'wide'"),
        (["label=nope"], "error: label: no run has the setting 'nope' (.hydra/config.yaml)"),
        (["group_by=nope"], "error: group_by: no run has the setting 'nope' (.hydra/config.yaml)"),
        (
            ["group_by=val/loss"],
            "error: group_by: no run has the setting 'val/loss' (.hydra/config.yaml) (a metric: sort=",
        ),
        (["label=seed"], "error: label: seed=0 names more than one line: choose settings that tell them apart"),
        (
            ["sort=val/nope"],
            "error: sort: no run's summary.json has val/nope (they have: global_step, status, val/loss)",
        ),
        (["metrics=nope"], "error: metrics: no run's summary.json has nope (they have: global_step, status, val/loss)"),
        (["out=x.jpeg2"], "error: out=x.jpeg2: matplotlib cannot write .jpeg2 files; give one of: "),
        (["plot=val/nope"], "error: plot: no run logged val/nope (their metrics.jsonl have: val/loss)"),
        (["logx=maybe"], "error: logx: must be true or false, got 'maybe'"),
    ],
)
def test_compares_mistakes_are_one_line(seeded, capsys, arguments, message):
    from transformer_lab.commands.compare import main

    plot = [] if any(a.startswith("plot=") for a in arguments) else ["plot=val/loss"]
    with pytest.raises(SystemExit) as exit_:
        main([*map(str, seeded), *arguments, *plot])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and err.startswith(message) and err.count("\n") == 1
    assert out == ""  # every option checked before the table is printed


def test_paths_a_run_twice_and_where_the_plot_goes(seeded, tmp_path, capsys, monkeypatch):
    from transformer_lab.commands.compare import main

    monkeypatch.setenv("COLUMNS", "200")
    sweep = seeded[0].parent
    # paths= is the words' list; a run named twice (a glob over a sweep and the sweep) is counted once
    assert main([f"paths={seeded[0]},{seeded[1]}", "group_by=optim.lr", "metrics=val/loss"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:2] == ["0.001", "2"]
    assert main([str(sweep), str(seeded[0]), "group_by=optim.lr", "metrics=val/loss"]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()[2:]] == ["2", "3"]
    # out= a folder: its compare.png; without an extension: .png; and the line says where it went
    (tmp_path / "figures").mkdir()
    for out, written in (
        (tmp_path / "figures", tmp_path / "figures" / "compare.png"),
        (tmp_path / "noext", tmp_path / "noext.png"),
    ):
        assert main([str(sweep), "plot=val/loss", f"out={out}"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == f"plot: {written}" and written.is_file()


def test_group_by_leaves_failed_runs_out_and_says_what_it_pools(seeded, capsys, monkeypatch):
    from transformer_lab.commands.compare import main

    monkeypatch.setenv("COLUMNS", "200")
    summary = json.loads((seeded[2] / "summary.json").read_text())
    (seeded[2] / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))
    other = fake_run(seeded[0].parent / "other_p", ["data=modular", "data.p=11", "optim.lr=1e-3"], 9.0)
    assert main([*map(str, seeded), str(other), "group_by=optim.lr", "metrics=val/loss"]) == 0
    captured = capsys.readouterr()
    rows = {line.split()[0]: line.split() for line in captured.out.splitlines()[2:]}
    assert rows["0.001"][:3] == ["0.001", "3", "4.5"]  # (2.0 + 2.5 + 9.0) / 3: the failed 3.0 left out
    assert f"warning: {seeded[2]} failed: left out of the groups' statistics" in captured.err
    assert "warning: optim.lr=0.001 pools runs that differ in data.p: add them to group_by" in captured.err


def resumed(run_dir, to_steps: int):
    """`run_dir` taken further by a resume (ckpt_path=last trainer.max_steps=N): its newer record (.hydra/TIME/,
    rundir.record), its summary at the new step and its metrics.jsonl on to it."""
    import time

    from omegaconf import OmegaConf

    time.sleep(0.01)  # (the newer record: a later mtime)
    later = run_dir / ".hydra" / "2026-11-25_12-00-00"
    later.mkdir()
    overrides = [
        *OmegaConf.load(run_dir / ".hydra" / "overrides.yaml"),
        "ckpt_path=last",
        f"trainer.max_steps={to_steps}",
    ]
    (later / "config.yaml").write_text(composed_yaml(tuple(overrides)))
    at(run_dir, to_steps)
    return run_dir


def at(run_dir, step: int):
    """`run_dir`'s summary.json and metrics.jsonl as its run left them at `step` (every 100 steps logged)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "global_step": step}))
    loss = summary["val/loss"]
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "val/loss": loss + 100 / s}) + "\n" for s in range(100, step + 1, 100))
    )
    return run_dir


@pytest.fixture
def lengths(tmp_path):
    """Five 300-step runs (two learning rates, three and two seeds), their overrides recorded as train.py does."""
    from omegaconf import OmegaConf

    runs = {}
    for (lr, seed), loss in {
        ("1e-3", 0): 2.0,
        ("1e-3", 1): 2.5,
        ("1e-3", 2): 3.0,
        ("3e-3", 0): 1.0,
        ("3e-3", 1): 1.4,
    }.items():
        overrides = ["data=modular", f"optim.lr={lr}", f"seed={seed}", "trainer.max_steps=300"]
        run = fake_run(tmp_path / f"lr{lr}_s{seed}", overrides, loss)
        OmegaConf.save(OmegaConf.create(overrides), run / ".hydra" / "overrides.yaml")
        runs[lr, seed] = at(run, 300)
    return runs


def test_a_group_of_runs_of_different_lengths_is_said_in_one_line(lengths, capsys, monkeypatch):
    """A run a resume took from 300 to 400 steps among 300-step runs, a run stopped at step 200 of 300, and runs
    that agree: group_by averages each group, and says where a group's runs differ in length, naming them."""
    from transformer_lab.commands.compare import main

    monkeypatch.setenv("COLUMNS", "200")
    s0, s1, s2 = (lengths["1e-3", seed] for seed in range(3))
    paths = [*map(str, lengths.values()), "metrics=val/loss,global_step"]
    args = [*paths, "group_by=optim.lr"]
    assert main(args) == 0  # all 300 steps: nothing to say
    assert capsys.readouterr().err == ""

    resumed(s2, 400)
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"warning: optim.lr=0.001 averages runs of different lengths (step 300 of 300: {s0}, {s1}; step 400 of 400: "
        f"{s2}): add trainer.max_steps to group_by to split them\n"
    )  # (one line: not a second one for trainer.max_steps, none for ckpt_path)
    rows = {line.split()[0]: line.split() for line in captured.out.splitlines()[2:]}
    assert rows["0.001"][:2] == ["0.001", "3"] and rows["0.003"][:2] == ["0.003", "2"]  # averaged, as it said

    assert main([*paths, "group_by=optim.lr,trainer.max_steps"]) == 0  # split: each group of one length
    captured = capsys.readouterr()
    assert captured.err == ""
    assert [line.split()[:3] for line in captured.out.splitlines()[2:]] == [
        ["0.003", "300", "2"],
        ["0.001", "300", "2"],
        ["0.001", "400", "1"],
    ]

    at(lengths["3e-3", 1], 200)  # stopped early: the same trainer.max_steps, fewer steps
    assert main(args) == 0
    assert capsys.readouterr().err.splitlines()[1] == (
        f"warning: optim.lr=0.003 averages runs of different lengths (step 200 of 300: {lengths['3e-3', 1]}; "
        f"step 300 of 300: {lengths['3e-3', 0]}): their metrics are at different steps"
    )
    out = s0.parent / "plot.png"  # a plot's line is its seeds' mean too: said the same way
    assert main([*map(str, lengths.values()), "plot=val/loss", f"out={out}"]) == 0
    assert capsys.readouterr().err == (
        "warning: optim.lr=0.003 trainer.max_steps=300 averages runs of different lengths (step 200 of 300: "
        f"{lengths['3e-3', 1]}; step 300 of 300: {lengths['3e-3', 0]}): their metrics are at different steps\n"
    )


def test_how_a_run_was_started_or_resumed_is_never_a_setting_a_group_or_a_label(lengths, tmp_path, capsys, monkeypatch):
    """ckpt_path (a resume's), overwrite and init_strict say how a run started, not what it trained: not in its
    settings, so the table, the groups and a plot's labels never show them; asked for, one line says why."""
    from transformer_lab.api.runs import RunDir, resolved_settings
    from transformer_lab.commands.compare import main, plot_groups

    monkeypatch.setenv("COLUMNS", "250")
    s2 = resumed(lengths["1e-3", 2], 400)
    again = fake_run(tmp_path / "again", ["data=modular", "optim.lr=3e-3", "seed=2", "trainer.max_steps=300",
                                          "overwrite=true", "init_strict=true"], 1.2)  # fmt: skip
    at(again, 300)
    settings = resolved_settings(s2)
    assert settings["trainer.max_steps"] == "400" and "ckpt_path" not in settings  # its newest record's
    assert not {"ckpt_path", "overwrite", "init_strict"} & set(resolved_settings(again))
    assert not [k for k in settings if k.startswith("hydra.")] and "init_from" in settings  # (what it started from)

    paths = [*lengths.values(), again]
    runs = [RunDir(p, json.loads((p / "summary.json").read_text()), resolved_settings(p)) for p in paths]
    labels = [(name, len(members)) for name, members in plot_groups(runs, [], [])]
    assert labels == [  # the resumed run a line of its own, by what it trained
        ("optim.lr=0.001 trainer.max_steps=300", 2),
        ("optim.lr=0.001 trainer.max_steps=400", 1),
        ("optim.lr=0.003 trainer.max_steps=300", 3),
    ]
    assert main([*map(str, paths), "plot=val/loss", f"out={tmp_path / 'plot.png'}"]) == 0
    captured = capsys.readouterr()
    assert "ckpt_path" not in captured.out and "overwrite" not in captured.out and captured.err == ""
    assert captured.out.splitlines()[0].split() == [
        *("run", "data.seed", "optim.lr", "seed", "trainer.max_steps"),
        *("val/loss", "global_step", "status"),
    ]

    for argument in ("group_by=ckpt_path", "label=overwrite", "group_by=optim.lr,init_strict", "label=hydra.job.num"):
        option, _, value = argument.partition("=")
        with pytest.raises(SystemExit) as exit_:
            main([*map(str, paths), argument, "plot=val/loss"])
        key = value.split(",")[-1]
        assert exit_.value.code == 2 and capsys.readouterr().err == (
            f"error: {option}: {key} only says how a run was started or resumed, not what it trained: choose a "
            "setting of the runs' .hydra/config.yaml that does\n"
        )


def test_a_run_without_a_summary_is_left_out_in_one_warning_line(seeded, capsys, monkeypatch):
    """A job still training, or killed before its summary.json (its metrics.jsonl or checkpoints there), is not in
    the table: compare and runs() say so in one line naming it; with nothing else to show, the error names it."""
    import transformer_lab
    from transformer_lab.commands.compare import main
    from transformer_lab.errors import UserError

    monkeypatch.setenv("COLUMNS", "200")
    killed, training = seeded[0].parent / "killed", seeded[0].parent / "training"
    (killed / "checkpoints").mkdir(parents=True)
    (killed / "checkpoints" / "last.ckpt").write_bytes(b"")
    training.mkdir()
    (training / "metrics.jsonl").write_text('{"step": 5, "val/loss": 3.0}\n')
    assert main([str(seeded[0].parent), "metrics=val/loss"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 + len(seeded)  # (the header, its rule, a row a run with a summary)
    assert captured.err == (
        f"warning: left out 2 run directories without a summary.json (still training, or killed before writing "
        f"one): {killed}, {training}\n"
    )
    with pytest.warns(UserWarning, match=f"left out 2 run directories .*: {killed}, {training}$"):
        assert len(transformer_lab.runs(seeded[0].parent)) == len(seeded)
    with pytest.raises(UserError) as error:
        transformer_lab.runs(killed)
    assert str(error.value) == (
        f"no run directories (with a summary.json) under {killed}; 1 run directory without a summary.json (still "
        f"training, or killed before writing one): {killed}"
    )
