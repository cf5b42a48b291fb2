"""Optuna sweeps through hydra-optuna-sweeper: trials run, a failed trial is recorded and the sweep goes on.

Here: the sweep configs; tests/e2e/test_sweeps.py has the rest."""

import yaml

from helpers.runs import ROOT


def test_sweep_configs_select_optuna_and_name_an_objective():
    for name, objective, direction in [
        ("gpt_shakespeare", "val/loss_best", "minimize"),
        ("encdec_translation", "val/bleu_best", "maximize"),
        ("grokking", "val/acc_best", "maximize"),
    ]:
        text = (ROOT / "conf" / "sweep" / f"{name}.yaml").read_text()
        config = yaml.safe_load(text)
        assert {"override /hydra/sweeper": "optuna"} in config["defaults"] and config["objective"] == objective
        assert config["hydra"]["sweeper"]["direction"] == direction and config["hydra"]["sweeper"]["params"]
