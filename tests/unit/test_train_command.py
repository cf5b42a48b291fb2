"""The train command's own lines around Hydra's app (commands/train.py): what a Ctrl-C that reaches it says, for a
run and for a sweep. (Its mistakes' lines: tests/e2e/test_bad_inputs.py; train() in a process: tests/unit/test_api.py.)"""

import sys

import pytest

from transformer_lab.commands.train import train


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
        train(pressed_ctrl_c, argv, process_ends=False)
    assert exit_.value.code == 130 and capsys.readouterr().err == f"{line}\n"
