"""W&B sweep specs driving Hydra: the agent's command line, and the offline `hydra/sweeper=wandb`.

Here: the online route, with wandb stood in for; tests/e2e/test_wandb_sweeps.py has the rest."""

import sys

import yaml

from helpers.runs import ROOT


def test_online_route_registers_the_spec_and_runs_the_servers_proposals(monkeypatch):
    """Online, the spec goes to the W&B server (wandb.sweep) and every trial is one the server proposes
    (wandb.agent calls back; wandb.init carries the proposal), run as a Hydra job and finished with its
    state. No server here: wandb's three entry points are stood in for, the sweeper's own logic is real."""
    from types import SimpleNamespace

    from hydra_plugins.transformer_lab_wandb_sweeper.wandb_sweeper import WandbSweeper

    spec = yaml.safe_load((ROOT / "conf" / "wandb_sweep" / "gpt_shakespeare.yaml").read_text())
    proposals = [{"optim.lr": 0.001, "model.n_embd": 64}, {"optim.lr": 0.003, "model.n_embd": 128}]
    calls = {"finish": [], "launched": []}

    def agent(sweep_id, function, count, project, entity):
        calls["agent"] = (sweep_id, count, project, entity)
        for _ in range(count):
            function()

    def init():
        config = proposals[len(calls["launched"])]
        fake.run = SimpleNamespace(config=config, id=f"run{len(calls['launched'])}")
        return fake.run

    def finish(exit_code):
        calls["finish"].append(exit_code)
        fake.run = None

    fake = SimpleNamespace(
        sweep=lambda s, project, entity: calls.setdefault("sweep", (s, project, entity)) and "SWEEP",
        agent=agent,
        init=init,
        finish=finish,
        run=None,
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    sweeper = WandbSweeper(spec="gpt_shakespeare", count=2, mode="online", project="proj", entity="team")
    sweeper.metric = spec["metric"]["name"]

    def run_trial(arguments, params):
        calls["launched"].append((arguments, params))
        return ("finished", 1.5, {}) if params["optim.lr"] == 0.001 else ("failed", None, {})

    sweeper._run_trial = run_trial
    trials = sweeper._sweep_online(spec, ["trainer.max_steps=10"])
    assert calls["sweep"] == (spec, "proj", "team") and calls["agent"] == ("SWEEP", 2, "proj", "team")
    assert calls["launched"] == [(["trainer.max_steps=10"], p) for p in proposals]
    assert calls["finish"] == [0, 1]  # each trial's run ends with its state
    assert [(t["state"], t["val/loss_best"], t["run_id"]) for t in trials] == [
        ("finished", 1.5, "run0"),
        ("failed", None, "run1"),
    ]
