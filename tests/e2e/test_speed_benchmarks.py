"""benchmarks/time_to_target.py (whole runs of a preset to a target val/loss, recipes interleaved): what it prints
and keeps when a recipe misses the target or fails, its refusals; benchmarks/muon_step.py."""

import json

from helpers.runs import ROOT, needs_shakespeare, run_script

SCRIPT = ROOT / "benchmarks" / "time_to_target.py"
SHORT = "trainer.max_steps=6 trainer.val_check_interval=3 trainer.limit_val_batches=2 task.sample.enabled=false"


def time_to_target(*args):
    """`python benchmarks/time_to_target.py ARGS` (in this process: the runs it times are processes of their own)."""
    return run_script(SCRIPT, *args)


@needs_shakespeare
def test_a_recipe_that_misses_the_target_has_no_time_and_a_failing_one_keeps_the_others(tmp_path):
    out = tmp_path / "ttt"
    result = time_to_target(
        "--rounds", "1", "--target", "4.1", "--out", str(out),
        "--recipe", f"learns={SHORT} optim.warmup_steps=0",
        "--recipe", f"frozen={SHORT} optim.lr=1e-9 optim.min_lr=0 optim.muon_lr=1e-9 optim.warmup_steps=0",
        "--recipe", f"broken={SHORT} model.n_embd=30",
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "error: " in result.stderr and "model.n_embd" in result.stderr  # the failing run's own one line
    kept = json.loads((out / "results.json").read_text())["runs"]
    assert kept["learns"][0]["reached"] and not kept["frozen"][0]["reached"] and kept["broken"] == []

    out = tmp_path / "ttt2"
    result = time_to_target("--rounds", "1", "--target", "4.1", "--out", str(out),
                        "--recipe", f"learns={SHORT} optim.warmup_steps=0",
                        "--recipe", f"frozen={SHORT} optim.lr=1e-9 optim.min_lr=0 optim.muon_lr=1e-9 optim.warmup_steps=0")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "frozen: not reached in 1 of 1 rounds (ended at steps [6])" in result.stdout
    assert "learns:" in result.stdout and "(1.000x learns)" in result.stdout


def test_its_folder_is_new_and_makeable(tmp_path):
    (tmp_path / "file").write_text("")
    for out, message in (
        (tmp_path, "exists: give a new folder (its runs are never overwritten)"),
        (tmp_path / "file" / "sub", "cannot make it (Not a directory)"),
    ):
        result = time_to_target("--out", str(out))
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    result = time_to_target("--out", str(tmp_path / "new"), "--recipe", "noname")
    assert result.returncode == 2 and "--recipe takes NAME=\"OVERRIDES\", got 'noname'" in result.stderr


def test_muon_step_times_both_optimizers_and_refuses_a_size_it_cannot_build():
    script = ROOT / "benchmarks" / "muon_step.py"
    small = run_script(script, "--n_layer", "1", "--n_embd", "16", "--steps", "2", "--rounds", "2")
    assert small.returncode == 0, small.stderr[-2000:]
    assert "gpt 1 x 16: 4 matrices, 4 shapes" in small.stdout and "StackedMuon / torch: " in small.stdout
    for args, message in ((["--n_embd", "30"], "--n_embd must be a positive multiple of the model's 4 heads, got 30"),
                          (["--steps", "0"], "--steps must be at least 1, got 0")):  # fmt: skip
        bad = run_script(script, *args)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr
