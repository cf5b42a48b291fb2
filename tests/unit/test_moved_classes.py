"""A checkpoint written before the package took its folders (run/, store/, config/, commands/) names the classes
of its config by their old paths (`transformer_lab.csv_logger.CSVLogger`): it is read as if written now, so its
run resumes and its model loads; every class the package's YAMLs name today is importable."""

import pytest
import torch
from hydra.utils import get_class

from helpers.runs import ROOT, TINY, compose_cfg
from transformer_lab.run.build import build, load_model
from transformer_lab.store.checkpoint import MOVED_CLASSES, read_checkpoint

OVERRIDES = ["model=gpt", "data=modular", "data.p=11", *TINY, "logger=csv", "task.sample.enabled=false"]


@pytest.fixture(scope="module")
def old_checkpoint(tmp_path_factory):
    """A tiny GPT's checkpoint whose config names the CSV logger by its path before the move."""
    run = tmp_path_factory.mktemp("moved") / "run"
    cfg = compose_cfg(OVERRIDES, output_dir=str(run))
    _, _, task = build(cfg, OVERRIDES)
    meta = task.checkpoint_meta
    assert meta["config"]["logger"]["csv"]["_target_"] == "transformer_lab.run.loggers.CSVLogger"
    meta["config"]["logger"]["csv"]["_target_"] = "transformer_lab.csv_logger.CSVLogger"  # (as written before)
    (run / "checkpoints").mkdir(parents=True)
    path = run / "checkpoints" / "last.ckpt"
    torch.save({"state_dict": task.state_dict(), "transformer_lab": meta, "global_step": 3}, path)
    return path


def test_an_old_checkpoint_names_the_logger_where_it_is_now(old_checkpoint):
    config = read_checkpoint(old_checkpoint)["transformer_lab"]["config"]
    assert config["logger"]["csv"]["_target_"] == "transformer_lab.run.loggers.CSVLogger"
    assert get_class(config["logger"]["csv"]["_target_"]).__name__ == "CSVLogger"


def test_an_old_checkpoints_model_loads(old_checkpoint):
    model, meta = load_model(old_checkpoint)
    assert type(model).__name__ == "GPT" and "csv_logger" not in str(meta["config"])


def test_every_moved_class_is_importable_at_its_new_path():
    for old, new in MOVED_CLASSES.items():
        assert old != new and get_class(new).__name__ == old.rpartition(".")[2]


def test_every_class_the_configs_name_is_importable():
    """Every `_target_: transformer_lab....` in conf/ (what a run's config, and so its checkpoint, names)."""
    import re

    targets = {
        m.group(1)
        for path in (ROOT / "conf").rglob("*.yaml")
        for m in re.finditer(r"_target_:\s*(transformer_lab\.[\w.]+)", path.read_text())
    }
    assert len(targets) > 10
    for target in sorted(targets):
        assert isinstance(get_class(target), type), target
