"""A checkpoint names its config's classes by path (`_target_`): every class the package's YAMLs name is importable
there, and a checkpoint of an earlier layout (no `format`, or another) is refused in one line, not read as if it
were today's."""

import pytest
import torch
from hydra.utils import get_class

from helpers.runs import ROOT, TINY, compose_cfg
from transformer_lab.errors import UserError
from transformer_lab.run.build import build
from transformer_lab.store.checkpoint import FORMAT, read_checkpoint

OVERRIDES = ["model=gpt", "data=modular", "data.p=11", *TINY, "logger=none", "task.sample.enabled=false"]


@pytest.mark.parametrize("stamp", [None, FORMAT + 1])
def test_a_checkpoint_of_another_format_is_refused_in_one_line(stamp, tmp_path):
    cfg = compose_cfg(OVERRIDES, output_dir=str(tmp_path / "run"))
    _, _, task = build(cfg, OVERRIDES)
    meta = dict(task.checkpoint_meta)
    assert meta.pop("format") == FORMAT
    if stamp is not None:
        meta["format"] = stamp
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": task.state_dict(), "transformer_lab": meta}, path)
    with pytest.raises(UserError) as info:
        read_checkpoint(path)
    assert str(info.value) == (
        f"{path} was written by an earlier transformer-lab (checkpoint format {stamp or 0}, this one reads {FORMAT}): "
        "train it again, or use the transformer-lab it was written with"
    )


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
