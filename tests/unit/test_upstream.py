"""The private hooks this repository keeps into Lightning and Hydra, each with its upstream issue: these tests
fail when upstream fixes the problem (the hook can go) or changes what the hook relies on (it must change).
Everything else goes through public APIs."""

import inspect
import sys

import lightning as L
import pytest
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import RichProgressBar as LightningRichProgressBar
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from omegaconf import open_dict

from helpers.runs import ROOT, compose_cfg


def test_lightning_rich_bar_still_shows_minus_two_epochs():
    # callbacks/progress.py overrides RichProgressBar._get_train_description: Lightning 2.6 shows a total
    # of -2 epochs when max_epochs=-1 (fixed in https://github.com/Lightning-AI/pytorch-lightning/pull/21924,
    # not released). When this fails, Lightning's bar is right: delete the override.
    bar = LightningRichProgressBar()
    trainer = L.Trainer(accelerator="cpu", max_epochs=-1, max_steps=10, callbacks=[bar], logger=False)
    bar.setup(trainer, None, "fit")
    assert "/-2" in bar._get_train_description(0)


def test_lightning_ddp_launcher_still_repeats_the_whole_command_line(monkeypatch, tmp_path):
    # run/launch.py replaces the DDP launchers' _hydra_subprocess_cmd: under Hydra, Lightning starts each other
    # process with the whole command line, so in a multirun every process starts the entire sweep again
    # (https://github.com/Lightning-AI/pytorch-lightning/issues/11300,
    # https://github.com/facebookresearch/hydra/issues/2070).
    from lightning.fabric.strategies.launchers import subprocess_script as fabric_launcher
    from lightning.pytorch.strategies.launchers import subprocess_script as pytorch_launcher

    from transformer_lab.run import launch

    # What the hook relies on: both launchers call the module-level function by this name.
    for module in (fabric_launcher, pytorch_launcher):
        assert module._hydra_subprocess_cmd is launch.ddp_process_command
        assert "_hydra_subprocess_cmd(" in inspect.getsource(module)
    # The upstream problem: Lightning's own command is the process's argv again, the sweep included.
    cfg = compose_cfg([], tmp_path, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.cwd, cfg.hydra.run.dir = str(tmp_path), str(tmp_path / "job")
        cfg.hydra.runtime.output_dir = cfg.hydra.run.dir
    HydraConfig.instance().set_config(cfg)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "train.py"), "-m", "seed=0,1"])
    try:
        command, _ = launch.LIGHTNING_COMMAND(1)
        ours, _ = launch.ddp_process_command(1)
    finally:
        HydraConfig.instance().cfg = None  # (as before the test, for the next in this process)
    assert command[-5:-3] == ["-m", "seed=0,1"]  # (then its hydra.run.dir, job name, output_subdir)
    assert "-m" not in ours


def test_lightning_wandb_logger_still_passes_anonymous(tmp_path):
    # run/loggers.py drops the `anonymous` argument Lightning always gives wandb.init, which W&B 0.31 warns
    # about (W&B removed anonymous mode: https://github.com/wandb/wandb/pull/10909). When this fails,
    # Lightning no longer passes it: delete the pop.
    from transformer_lab.run.loggers import WandbLogger

    assert "anonymous" in LightningWandbLogger(offline=True, save_dir=str(tmp_path))._wandb_init
    assert "anonymous" not in WandbLogger(offline=True, save_dir=str(tmp_path))._wandb_init


def test_lightning_bar_total_is_still_the_steps_left_and_ours_counts_a_resumed_epoch():
    """Lightning's total of a step-limited run is max_steps - global_step, while the bar counts the epoch's
    batches from its start (a resumed run showed 25/15); ours (callbacks/progress.py) counts both the same way
    and reads the epoch's batches done from the loop Lightning restores (a test here fails if that moves)."""
    from types import SimpleNamespace

    from transformer_lab.callbacks.progress import RichProgressBar

    trainer = L.Trainer(max_steps=25, max_epochs=-1, logger=False, enable_checkpointing=False)
    assert trainer.fit_loop.epoch_loop.batch_progress.current.ready == 0  # (the attribute ours reads)

    def bar_for(max_steps, done, **state):
        fake = SimpleNamespace(max_epochs=-1, max_steps=max_steps, accumulate_grad_batches=1, **state)
        fake.fit_loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(
            current=SimpleNamespace(ready=done))))  # fmt: skip
        for cls in (LightningRichProgressBar, RichProgressBar):
            bar = cls()
            bar._trainer = fake
            yield bar.total_train_batches

    endless = float("inf")  # an endless epoch resumed at step 10 of 25: the bar counts 11 .. 25
    assert list(bar_for(25, done=10, global_step=10, num_training_batches=endless)) == [15, 25]
    # epochs of 251 batches, resumed at step 300 (batch 49 of the second) of 400: it counts 50 .. 149
    assert list(bar_for(400, done=49, global_step=300, num_training_batches=251)) == [100, 149]


def test_lightning_checkpoint_still_forgets_its_best_when_moved_and_moved_run_keeps_it(tmp_path):
    """callbacks/moved.py rewrites a moved run's ModelCheckpoint states before Lightning loads them: Lightning
    keeps best_model_score only where `dirpath` is the one saved. When this fails on Lightning's line, it
    follows moved directories itself: delete MovedRun."""
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from transformer_lab.callbacks.moved import MovedRun

    old, new = tmp_path / "old" / "checkpoints", tmp_path / "new" / "checkpoints"
    new.mkdir(parents=True)
    (new / "best.ckpt").write_bytes(b"w")
    saved = ModelCheckpoint(dirpath=str(old), filename="best", monitor="val/loss").state_dict()
    saved.update(best_model_score=torch.tensor(1.5), best_model_path=str(old / "best.ckpt"),
                 best_k_models={str(old / "best.ckpt"): torch.tensor(1.5)})  # fmt: skip
    lightning = ModelCheckpoint(dirpath=str(new), filename="best", monitor="val/loss")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        lightning.load_state_dict(dict(saved))
    assert lightning.best_model_score is None
    checkpoint = {"callbacks": {"ModelCheckpoint": dict(saved)}}
    MovedRun(tmp_path / "new").on_load_checkpoint(None, None, checkpoint)
    ours = ModelCheckpoint(dirpath=str(new), filename="best", monitor="val/loss")
    ours.load_state_dict(checkpoint["callbacks"]["ModelCheckpoint"])
    assert ours.best_model_score == 1.5 and ours.best_model_path == str(new / "best.ckpt")
    assert list(ours.best_k_models) == [str(new / "best.ckpt")]
