import secrets

from helpers.runs import TINY, run_train


def test_wandb_api_key_never_lands_in_run_outputs(tmp_path):
    planted = f"planted-{secrets.token_hex(16)}"
    run_dir = tmp_path / "run"
    result = run_train(
        "data=modular",
        "data.p=7",
        *TINY,
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "logger=wandb",
        f"hydra.run.dir={run_dir}",
        env={"WANDB_API_KEY": planted, "WANDB_MODE": "offline"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".ckpt" for p in files) and any(p.suffix == ".wandb" for p in files)
    assert (run_dir / "summary.json") in files and (run_dir / ".hydra" / "config.yaml") in files
    leaked = [str(p) for p in files if planted.encode() in p.read_bytes()]
    assert not leaked
    assert planted not in result.stdout + result.stderr
