"""The train command's own lines around Hydra's app (commands/train.py): what a Ctrl-C that reaches it says, for a
run and for a sweep. (Its mistakes' lines: tests/e2e/test_bad_inputs.py; train() in a process: tests/unit/test_api.py.)"""

import sys

import pytest

from transformer_lab.commands.train import command_line


def pressed_ctrl_c(trials):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "argv, line",
    [
        (["data=modular"], "interrupted (Ctrl-C) before training started: nothing was trained"),
        (
            ["-m", "data=modular", "seed=0,1"],
            "interrupted (Ctrl-C): the sweep stopped; a job that had trained resumes from its last checkpoint "
            "(python train.py ckpt_path=last hydra.run.dir=SWEEP_DIR/N); those not started did not run",
        ),
    ],
)
def test_ctrl_c_that_reaches_the_command_says_what_was_stopped(argv, line, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")  # (the command sets it; put back after the test)
    with pytest.raises(SystemExit) as exit_:
        command_line(pressed_ctrl_c, argv, process_ends=False)
    assert exit_.value.code == 130 and capsys.readouterr().err == f"{line}\n"


def test_a_multirun_flag_among_the_overrides_is_read_as_if_written_first(tmp_path, monkeypatch):
    """Hydra's parser takes the overrides only before its first flag: -m written after one left the rest
    'unrecognized arguments'. Hydra's app is given the flag first, the overrides in their order."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    given = []
    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    command_line(
        lambda trials: given.append(sys.argv[1:]), ["data=modular", "seed=0,1", "-m", sweep], process_ends=False
    )
    assert given == [["-m", "data=modular", "seed=0,1", sweep]] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "swept, message",
    [
        (["model.n_layr=1,2"], "model.n_layr: no such key; did you mean model.n_layer?"),
        (["model=gpt,gtp"], "model=gtp: no such option; model has: bert, encdec, gpt, t5"),
        (["data=modular,shakespeare", "data.p=11"],  # (the second option's keys: shakespeare has no p)
         "data.p: no such key; data has: _target_, name, data_dir, path, block_size, batch_size, val_batch_size, "
         "val_fraction, seed, sample_prompt, model_defaults"),
        (["hydra/launcher=parallel", "hydra.launcher.job=2", "seed=0,1"],
         "hydra.launcher.job: no such key; did you mean hydra.launcher.jobs?"),
    ],
)  # fmt: skip
def test_a_sweeps_mistake_in_a_swept_key_or_option_is_told_before_anything_is_written(swept, message, tmp_path):
    """Hydra composes a sweep's jobs after its sweeper wrote multirun.yaml in the sweep's directory: a swept key
    or option it could not compose is told first, in one line, and no directory is made."""
    from helpers.runs import run_train

    result = run_train("-m", "data=modular", *swept, f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.splitlines() == [f"error: {message}"], result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("launcher", ["hydra/launcher=parallel", "hydra.launcher.jobs=0"])
def test_a_launcher_for_a_single_run_is_one_line(launcher, tmp_path):
    """Hydra launches a multirun's jobs: a launcher on a single run's command line would be ignored (the run going on
    as if it were not there)."""
    from helpers.runs import run_train

    result = run_train("data=modular", launcher, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: {launcher}: a launcher runs the jobs of a multirun; add -m (python train.py -m ...)"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "arguments",
    [["hydra.run.dir="], ["hydra.run.dir=''"], ["-m", "seed=0,1", "hydra.sweep.dir="]],
    ids=["run", "run-quoted", "sweep"],
)
def test_an_empty_run_directory_is_one_line_and_nothing_is_written_where_the_command_runs(arguments, tmp_path):
    """Hydra takes an empty hydra.run.dir for the working folder: the run wrote its files among the user's."""
    from helpers.runs import run_train

    key = next(a for a in arguments if a.startswith("hydra.")).partition("=")[0]
    result = run_train("data=modular", *arguments, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: {key} is empty: name the folder the run writes in, e.g. {key}=outputs/NAME"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "held, what", [("multirun.yaml", "another sweep (its multirun.yaml)"), ("summary.json", "a run")]
)
@pytest.mark.parametrize("by", ["command line", "preset"])
def test_a_sweep_into_a_folder_holding_another_sweep_or_a_run_is_one_line_before_anything_is_written(
    held, what, by, tmp_path
):
    """Hydra's sweeper would write its multirun.yaml over the other sweep's and put its jobs' folders beside that
    sweep's (those numbered alike refused one by one, the others run): a mixed sweep, its record gone."""
    from helpers.runs import run_train

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / held).write_text("the earlier one's\n")
    where = [f"hydra.sweep.dir={sweep}"]
    if by == "preset":  # (a preset of one's own that names its sweep's folder: it was not checked)
        (tmp_path / "mine" / "experiment").mkdir(parents=True)
        (tmp_path / "mine" / "experiment" / "mysweep.yaml").write_text(
            f"# @package _global_\nhydra:\n  sweep:\n    dir: {sweep}\n"
        )
        where = [f"hydra.searchpath=[file://{tmp_path / 'mine'}]", "experiment=mysweep"]
    result = run_train("-m", "data=modular", "seed=5,6,7", *where, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: hydra.sweep.dir={sweep} holds {what}: choose another hydra.sweep.dir (a job of a sweep resumes "
        f"alone: python train.py ckpt_path=last hydra.run.dir={sweep}/N)"
    ]
    assert [p.name for p in sweep.iterdir()] == [held] and (sweep / held).read_text() == "the earlier one's\n"


def test_a_key_an_options_yaml_sets_that_its_schema_has_not_is_one_line_naming_the_yaml(tmp_path):
    """A user's own data option (hydra.searchpath) whose YAML sets a key its schema has not: Hydra's line named the
    YAML and the schema's class in its own words (a stranger's finding); now the key, what the section has, and
    which YAML set it."""
    from helpers.runs import run_train

    (tmp_path / "conf" / "data").mkdir(parents=True)
    (tmp_path / "conf" / "data" / "mine.yaml").write_text(
        "defaults:\n  - /schema/data@_here_: modular\n  - _self_\n\npp: 11\n"
    )
    result = run_train("data=mine", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        "error: data.pp: no such key; data has: _target_, name, p, op, terms, train_fraction, split_seed, batch_size, "
        "val_batch_size, max_examples, seed, model_defaults (in data=mine's YAML)"
    ], result.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf"]
