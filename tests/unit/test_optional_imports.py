"""What init_from=hf: and export import, missing: one line saying what installs it, never a ModuleNotFoundError.
safetensors is a dependency of the project's own (the field's tensor format: init_from=hf:, export and the
attention command use it); transformers, which neither direction needs, is the [pretrained] extra's. A module is
made missing as Python sees one: None in sys.modules (`import` then raises ModuleNotFoundError)."""

import json
import sys

import pytest
import torch

from helpers.runs import ROOT, compose_cfg

V = 99
NOT_INSTALLED = "needs safetensors, which is not installed: pip install -e ."


def without(monkeypatch, *modules):
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def hub(tmp_path):
    """A GPT-2 checkpoint's directory as save_pretrained writes one (config.json, model.safetensors), written
    here from our gpt's tensors (no transformers needed)."""
    from safetensors.torch import save_file

    from transformer_lab.models.gpt import GPT, GPTConfig
    from transformer_lab.pretrained.gpt2 import GPT2

    config = {"model_type": "gpt2", "vocab_size": V, "n_positions": 32, "n_embd": 16, "n_layer": 1, "n_head": 2}
    settings = GPT2().settings(config, "hf:test")
    model = GPT(GPTConfig(**settings))
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {k: v.clone() for k, v in GPT2().to_hf(model.state_dict(), {**vars(model.config), **settings}).items()}
    save_file(tensors, str(folder / "model.safetensors"))
    return folder, model


def test_without_safetensors_init_from_hf_says_what_installs_it_on_every_path(hub, monkeypatch):
    """Before the run (pretrained.load.apply) and where the tensors are read (load_state: init_weights's path for
    hf:, which ended in a ModuleNotFoundError): the same line."""
    from transformer_lab.errors import UserError
    from transformer_lab.pretrained.hub import read_tensors
    from transformer_lab.pretrained.load import apply, load_state

    folder, model = hub
    assert read_tensors(folder)  # (whole, with safetensors)
    without(monkeypatch, "safetensors", "safetensors.torch")
    source = f"hf:{folder}"
    overrides = ["data=text", "data.path=x.txt", f"init_from={source}"]
    with pytest.raises(UserError) as info:
        apply(compose_cfg(overrides), overrides)
    assert str(info.value) == f"init_from={source} {NOT_INSTALLED}"
    for read in (lambda: load_state(model, source), lambda: read_tensors(folder)):
        with pytest.raises(UserError) as info:
            read()
        assert str(info.value) == f"init_from={source} {NOT_INSTALLED}"


def test_without_safetensors_export_says_it_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from transformer_lab.commands.export import main
    from transformer_lab.models.gpt import GPT, GPTConfig
    from transformer_lab.pretrained.load import MODELS
    from transformer_lab.pretrained.twin import settings_of
    from transformer_lab.store.checkpoint import FORMAT

    model = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    meta = {
        "format": FORMAT,
        "config": {"model": {"_target_": MODELS["gpt"], "name": "gpt", **settings_of(model)}, "task": {}},
        "model_args": {},
        "vocab": [chr(c) for c in range(32, 32 + V)],
    }
    path = tmp_path / "ours.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "transformer_lab": meta}, path)
    without(monkeypatch, "safetensors", "safetensors.torch")
    with pytest.raises(SystemExit) as exit_:
        main([str(path), str(tmp_path / "out")])
    assert exit_.value.code == 2 and capsys.readouterr().err == f"error: export {NOT_INSTALLED}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.ckpt"]


def test_a_hub_name_without_huggingface_hub_and_transformers_missing_name_what_installs_them(monkeypatch):
    from transformer_lab.errors import UserError
    from transformer_lab.pretrained.hub import imported
    from transformer_lab.pretrained.load import open_checkpoint

    without(monkeypatch, "huggingface_hub")
    with pytest.raises(UserError) as info:
        open_checkpoint("hf:someone/some-model")  # (a hub name: fetched with huggingface_hub)
    assert str(info.value) == (
        "init_from=hf:someone/some-model needs huggingface_hub, which is not installed: pip install -e ."
    )
    without(monkeypatch, "transformers", "transformers.models")
    for module in ("transformers", "transformers.models"):
        with pytest.raises(UserError) as info:
            imported(module, "export")
        assert str(info.value) == 'export needs transformers, which is not installed: pip install -e ".[pretrained]"'


def test_safetensors_is_a_dependency_and_transformers_the_pretrained_extras():
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = lambda specs: [s.split(">")[0].split("=")[0].split("[")[0].strip() for s in specs]  # noqa: E731
    assert "safetensors" in names(project["dependencies"])
    assert names(project["optional-dependencies"]["pretrained"]) == ["transformers"]
