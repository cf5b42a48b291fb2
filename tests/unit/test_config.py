"""Every config option composes and instantiates; bad values fail with one message naming the key."""

import dataclasses
import re
from types import SimpleNamespace

import hydra
import lightning as L
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from helpers.runs import ROOT, compose_cfg
from transformer_lab.callbacks import RichProgressBar
from transformer_lab.choices import check_ranges, within
from transformer_lab.config.checks import validate

# DESIGN.md's model x data matrix; the code computes it from what models and data modules declare.
from transformer_lab.config.classes import built_callbacks, make_datamodule
from transformer_lab.errors import ConfigError
from transformer_lab.run.build import build_model

SUPPORTED = {
    "gpt": ("shakespeare", "modular", "translation", "text", "repeats"),
    "encdec": ("translation", "modular"),
    "bert": ("modular", "labelled"),
    "t5": ("shakespeare", "translation", "text", "repeats"),
}
# What a model takes from the data, as a data module gives it after setup().
DATA = SimpleNamespace(vocab_size=17, source_vocab_size=None, n_classes=5, pad_id=0, sequence_length=8)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


def test_groups_offer_the_documented_options():
    assert options("data") == ["labelled", "modular", "repeats", "shakespeare", "text", "translation"]
    assert options("model") == ["bert", "encdec", "gpt", "t5"]
    assert set(options("hardware")) >= {"auto", "cpu", "gpu"}
    assert options("logger") == ["csv", "none", "tensorboard", "wandb"]
    assert {"shakespeare_char", "shakespeare_char_cpu"} <= set(options("experiment"))


@pytest.mark.parametrize("data", options("data"))
@pytest.mark.parametrize("model", options("model"))
def test_data_and_model_compose_and_instantiate(data, model, tmp_path):
    own = {"text": ["data.path=corpus.txt"], "labelled": ["data.path=labels.tsv"]}
    corpus = own.get(data, [])  # a corpus of one's own, which it must name
    cfg = compose_cfg(
        [f"data={data}", f"model={model}", "model.n_layer=1", "model.n_embd=32", "model.n_head=2", *corpus], tmp_path
    )
    validate(cfg)
    if data not in SUPPORTED[model]:
        with pytest.raises(ConfigError, match=f"task={cfg.task.name} does not train on data={data}"):
            make_datamodule(cfg)
        return
    make_datamodule(cfg)
    net, _ = build_model(cfg, DATA)  # sized by what the data gives, not by the config's defaults
    x = torch.randint(1, DATA.vocab_size, (2, DATA.sequence_length))
    logits = net(x) if model in ("gpt", "bert") else net(x, x)
    assert logits.shape[-1] == (DATA.n_classes if model == "bert" else DATA.vocab_size)


# Which tasks train which model on which data: DESIGN.md's matrix, computed from what models, tasks and
# data modules declare (config.classes.fits).
TASKS_OF = {
    ("gpt", "shakespeare"): {"lm"},
    ("gpt", "modular"): {"lm"},
    ("gpt", "translation"): {"lm"},
    ("encdec", "shakespeare"): {"spans"},
    ("encdec", "modular"): {"seq2seq"},
    ("encdec", "translation"): {"seq2seq", "spans"},
    ("bert", "shakespeare"): {"mlm"},
    ("bert", "modular"): {"classify"},
    ("bert", "translation"): {"mlm"},
    ("t5", "shakespeare"): {"spans"},
    ("t5", "modular"): {"seq2seq"},
    ("t5", "translation"): {"seq2seq", "spans"},
    ("gpt", "text"): {"lm"},
    ("encdec", "text"): {"spans"},
    ("bert", "text"): {"mlm"},
    ("t5", "text"): {"spans"},
    ("gpt", "labelled"): set(),
    ("encdec", "labelled"): set(),
    ("bert", "labelled"): {"classify"},
    ("t5", "labelled"): set(),
    ("gpt", "repeats"): {"lm"},
    ("encdec", "repeats"): {"spans"},
    ("bert", "repeats"): {"mlm"},
    ("t5", "repeats"): {"spans"},
}


def test_declarations_give_the_documented_matrix():
    from hydra.utils import get_class

    from transformer_lab.config.classes import fits
    from transformer_lab.config.schema import DATA, MODELS, TASKS

    batches = {t: yaml.safe_load((ROOT / "conf" / "task" / f"{t}.yaml").read_text())["batches"] for t in TASKS}
    for (model, data), tasks in TASKS_OF.items():
        model_cls, data_cls = get_class(MODELS[model][0]), get_class(DATA[data][0])
        fitting = {t for t, (target, _) in TASKS.items() if fits(model_cls, get_class(target), batches[t], data_cls)}
        assert fitting == tasks
    assert len(TASKS_OF) == len(MODELS) * len(DATA)


def test_a_model_yaml_names_its_task_and_task_picks_another(tmp_path):
    own = {"gpt": "lm", "encdec": "seq2seq", "bert": "classify", "t5": "spans"}
    for model, task in own.items():
        cfg = compose_cfg([f"model={model}"], tmp_path)
        assert cfg.task.name == task and cfg.task._target_.startswith("transformer_lab.tasks.")
    cfg = compose_cfg(["model=t5", "data=translation", "task=seq2seq", "task.decode.beam_size=2"], tmp_path)
    assert (cfg.task.name, cfg.task.decode.beam_size, cfg.task.label_smoothing) == ("seq2seq", 2, 0.1)
    # a run's config holds only its task's settings: no span corruption for a GPT, no samples for T5
    assert set(compose_cfg([], tmp_path).task) == {"_target_", "name", "sample", "decode", "batches", "metrics"}
    assert "sample" not in compose_cfg(["model=t5"], tmp_path).task
    assert not {"sample", "decode", "span", "mlm"} & set(compose_cfg([], tmp_path))


@pytest.mark.parametrize("logger", options("logger"))
def test_loggers_instantiate(logger, tmp_path):
    cfg = compose_cfg([f"logger={logger}"], tmp_path)
    if logger == "none":
        assert not cfg.logger
        return
    assert list(cfg.logger) == [logger]  # each logger has its own section, so several can be chosen
    if logger == "wandb":
        cfg.logger.wandb.offline = True  # instantiating creates no run; nothing reaches the network
    instance = hydra.utils.instantiate(cfg.logger[logger])
    assert type(instance).__name__.lower() == f"{logger}logger"


@pytest.mark.parametrize("callbacks", options("callbacks"))
def test_callbacks_instantiate(callbacks, tmp_path):
    needs = {"progress": ["data=modular"], "attention": ["callbacks.attention.text=hello"]}  # (what each reads)
    cfg = compose_cfg([f"callbacks={callbacks}", *needs.get(callbacks, [])], tmp_path)
    instances = [hydra.utils.instantiate(c) for c in (cfg.callbacks or {}).values()]
    assert (
        len(instances) == {"default": 6, "none": 0, "grokfast": 1, "ema": 1, "progress": 1, "attention": 1}[callbacks]
    )


@pytest.mark.parametrize("max_epochs, shown", [(-1, "Epoch 0"), (3, "Epoch 0/2")])
def test_progress_bar_shows_no_epoch_total_when_epochs_are_unlimited(max_epochs, shown):
    bar = RichProgressBar()  # Lightning 2.6's own shows "Epoch 0/-2" for max_epochs=-1
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=max_epochs,
        max_steps=10,
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
    )
    bar.setup(trainer, None, "fit")
    assert bar._get_train_description(0).strip() == shown


@pytest.mark.parametrize("hardware", options("hardware"))
def test_hardware_composes(hardware, tmp_path):
    cfg = compose_cfg([f"hardware={hardware}"], tmp_path)
    needs_gpu = cfg.trainer.accelerator == "gpu" or str(cfg.trainer.precision).startswith("16")
    if needs_gpu and not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="GPU"):
            validate(cfg)
    else:
        validate(cfg)


def test_hardware_options_combine_as_a_list(tmp_path):
    cfg = compose_cfg(["hardware=[cpu,bf16]"], tmp_path)
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == ("cpu", "bf16-mixed")
    validate(cfg)
    cfg = compose_cfg(["hardware=[gpu,fp16]", "trainer.devices=2"], tmp_path)
    assert (cfg.trainer.accelerator, cfg.trainer.precision, cfg.trainer.devices) == ("gpu", "16-mixed", 2)
    cfg = compose_cfg(["hardware=[cpu,fp16]"], tmp_path)
    with pytest.raises(ConfigError, match="fp16 .* needs a CUDA GPU: on the CPU Lightning would quietly use bf16"):
        validate(cfg)


@pytest.mark.parametrize("flags, precision", [("fma avx2", "32-true"), ("avx2 amx_bf16 amx_tile", "bf16-mixed")])
def test_cpu_bf16_uses_bf16_only_where_the_cpu_has_the_units(flags, precision, tmp_path, monkeypatch, capsys):
    import transformer_lab.config.schema as config

    real_read_text = config.Path.read_text
    monkeypatch.setattr(
        config.Path,
        "read_text",
        lambda self, *a, **k: f"flags\t: {flags}\n" if str(self) == "/proc/cpuinfo" else real_read_text(self, *a, **k),
    )
    cfg = compose_cfg(["hardware=cpu_bf16"], tmp_path)
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == ("cpu", precision)
    validate(cfg)
    # asking for bf16 outright on a CPU without the units runs, with one warning line saying what it costs
    validate(compose_cfg(["hardware=[cpu,bf16]"], tmp_path))
    warned = (
        "warning: bf16 autocast (trainer.precision=bf16-mixed) on a CPU without bf16 units" in capsys.readouterr().err
    )
    assert warned == (precision == "32-true")
    # the CPU preset takes bf16 where the units are, and with it the math attention kernel; float32 keeps torch's
    preset = compose_cfg(["experiment=shakespeare_char_cpu"], tmp_path)
    assert (preset.trainer.precision, preset.attention_kernel) == (
        precision,
        {"32-true": "auto"}.get(precision, "math"),
    )
    assert compose_cfg(["experiment=shakespeare_char_cpu", "hardware=cpu"], tmp_path).attention_kernel == "auto"


def test_model_compile_compiles_in_place(tmp_path):
    cfg = compose_cfg(
        ["data=modular", "model.compile=true", "model.n_layer=1", "model.n_embd=32", "model.n_head=2"], tmp_path
    )
    net, _ = build_model(cfg, DATA)
    assert net._compiled_call_impl is not None  # forward goes through torch.compile
    assert not any(k.startswith("_orig_mod") for k in net.state_dict())  # checkpoints keep their keys


@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiments_compose_and_validate(experiment, tmp_path):
    cfg = compose_cfg([f"experiment={experiment}", "hardware=cpu"], tmp_path)
    validate(cfg)
    assert (ROOT / "experiments" / f"{experiment}.md").exists(), "each preset has its results beside it"


def test_cpu_preset_is_nanogpts_model_trained_the_speedruns_way_and_nanogpts_recipe_is_one_set_of_overrides(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from preset_vs_loop import NANOGPT_RECIPE

    for overrides, recipe in (
        ([], ("muon", 0.03, 3e-3, 1e-4, 50, None, 500, True)),  # issue #45 (decay_steps: max_steps)
        (NANOGPT_RECIPE, ("adamw", 0.03, 1e-3, 1e-4, 100, 2000, 2000, False)),  # (muon_lr: unused by adamw)
    ):
        cfg = compose_cfg(["experiment=shakespeare_char_cpu", *overrides], tmp_path)
        assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.dropout) == (4, 4, 128, 0.0)
        assert (cfg.data.block_size, cfg.data.batch_size, cfg.optim.betas[1]) == (64, 12, 0.99)
        o = cfg.optim
        assert (str(o.name), o.muon_lr, o.lr, o.min_lr, o.warmup_steps, o.decay_steps, cfg.trainer.max_steps,
                cfg.model.qk_norm) == recipe  # fmt: skip
        assert (cfg.trainer.val_check_interval, cfg.trainer.limit_val_batches) == (250, 20)


BAD_VALUES = [
    (["model.n_embd=100", "model.n_head=3"], "model.n_embd", "not divisible by model.n_head=3"),
    (["model.block_size=128", "data.block_size=256"], "data.block_size", "model.block_size=128"),
    (["data.batch_size=0"], "data.batch_size", "positive integer"),
    (["data=modular", "data.p=100"], "data.p", "prime"),
    (["data=modular", "data.terms=1"], "data.terms", "must be an integer >= 2, got 1"),
    (
        ["model=encdec", "data=translation", "data.vocab_size=50"],
        "data.vocab_size",
        "must be an integer >= 100, got 50",
    ),
    (["model.dropout=1.5"], "model.dropout", "[0, 1)"),
    (["model.pos_encoding=rope", "model.n_embd=36", "model.n_head=4"], "model.n_embd", "even head size"),
    (["model=t5", "model.num_buckets=2"], "model.num_buckets", "num_buckets >= 4"),
    (["model=t5", "task.extra_ids=5"], "task.extra_ids", "noise spans"),
    (["task.sample.temperature=-1"], "task.sample.temperature", ">= 0"),
    (["task.decode.beam_size=0"], "task.decode.beam_size", "must be an integer >= 1, got 0"),
    (["model=encdec", "data=translation", "task.label_smoothing=1"], "task.label_smoothing", "[0, 1)"),
    (["optim.min_lr=1"], "optim.min_lr", "[0, optim.lr"),
    (["optim.name=muon", "optim.muon_weight_decay=-1"], "optim.muon_weight_decay", ">= 0 or null, got -1"),
    (["optim.name=muon", "optim.muon_weight_decay=inf"], "optim.muon_weight_decay", ">= 0 or null, got inf"),
    (["trainer.max_steps=-1"], "trainer.max_steps", "must be set"),
    (["callbacks.throughput.peak_flops=-5"], "callbacks.throughput.peak_flops", "must be a number > 0 or null, got -5"),
]


@pytest.mark.parametrize("overrides,key,fragment", BAD_VALUES, ids=[b[1] for b in BAD_VALUES])
def test_bad_values_name_the_key(overrides, key, fragment, tmp_path):
    cfg = compose_cfg(overrides, tmp_path)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
        make_datamodule(cfg)  # checks of the data beside the model (no file read)
        built_callbacks(cfg)  # a callback's own checks of its settings
    assert info.value.key == key and fragment in str(info.value)


def test_a_within_field_is_refused_outside_its_interval_as_extending_md_says():
    @dataclasses.dataclass
    class CellConfig:  # a user's model settings, as docs/extending.md declares them
        n_layer: int = within(2, "[1, inf)")
        keep: float | None = within(None, "(0, 1]")

        def __post_init__(self):
            check_ranges(self)

    for settings, message in [
        ({"n_layer": 0}, "n_layer: must be an integer >= 1, got 0"),
        ({"n_layer": 2.5}, "n_layer: must be an integer >= 1, got 2.5"),
        ({"n_layer": True}, "n_layer: must be an integer >= 1, got True"),
        ({"keep": 0.0}, "keep: must be a number in (0, 1] or null, got 0.0"),
        ({"keep": float("nan")}, "keep: must be a number in (0, 1] or null, got nan"),
    ]:
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            CellConfig(**settings)
    assert CellConfig(n_layer=1, keep=1).keep == 1 and CellConfig().keep is None


def test_resolved_config_is_plain_data(tmp_path):
    cfg = compose_cfg([], tmp_path)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["data"]["data_dir"] == f"{ROOT}/data" and resolved["data"]["seed"] == 1337


CHOICES = [
    (["model.mlp=geglu"], "gelu, gelu-tanh, relu, relu2, swiglu, none"),
    (["model=encdec", "model.activation=swish"], "relu, gelu, gelu-tanh, silu"),
    (["model=encdec", "model.sinusoid_layout=concat"], "interleaved, halves"),
    (["model.norm=batchnorm"], "layernorm, rmsnorm, none"),
    (["model=encdec", "model.pos_encoding=rope"], "sinusoidal, learned"),
    (["model=bert", "data=modular", "model.pooling=max"], "cls, mean"),
    (["model=t5", "model.feed_forward=swiglu"], "relu, gated-gelu"),
    (["data=modular", "data.op=pow"], "+, -, *, /"),
]


@pytest.mark.parametrize("overrides,choices", CHOICES, ids=[c[0][-1].split("=")[0] for c in CHOICES])
def test_a_wrong_choice_fails_while_composing_and_lists_the_choices(overrides, choices, tmp_path):
    wrong = overrides[-1].split("=")[1]
    with pytest.raises(Exception) as info:
        compose_cfg(overrides, tmp_path)
    assert f"Invalid value '{wrong}', expected one of [{choices}]" in str(info.value.__cause__)  # as train.py prints it
    key, value = overrides[-1].split("=")[0], choices.split(", ")[-1]
    cfg = compose_cfg([*overrides[:-1], f"{key}={value}"], tmp_path)
    assert OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)[key.split(".")[0]][key.split(".")[1]] == value


def test_schemas_are_the_settings_dataclasses_the_classes_declare(tmp_path):
    import dataclasses

    from hydra.utils import get_class

    from transformer_lab.config.schema import DATA, MODELS, TASKS
    from transformer_lab.data.configs import DATA_DECIDED

    for group, options in (("data", DATA), ("model", MODELS), ("task", TASKS)):
        for name, (target, config_class) in options.items():
            assert get_class(target).config_class is config_class, target
            section = compose_cfg([f"{group}={name}"], tmp_path)[group]
            fields = {
                f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(config_class)
            }
            if group == "model":
                fields = {k: v for k, v in fields.items() if k not in DATA_DECIDED}
                assert section.compile is False and section.get("block_size", None) is None
            not_settings = {"_target_", "name", "compile", "model_defaults"}
            assert set(section) - not_settings == set(fields) | ({"block_size"} & set(section)), target
            for key, default in fields.items():
                if key not in ("data_dir", "seed", "batches", "metrics"):  # paths.data_dir, seed; a task's YAML
                    expected = dataclasses.asdict(default) if dataclasses.is_dataclass(default) else default
                    assert section[key] == expected, (name, key)


def test_debug_presets_configure_the_trainer(tmp_path):
    from transformer_lab.config.trainer import trainer_arguments

    profile = trainer_arguments(compose_cfg(["debug=profile"], tmp_path))["profiler"]
    assert type(profile).__name__ == "SimpleProfiler" and profile.dirpath == str(tmp_path)
    assert compose_cfg(["debug=anomaly"], tmp_path).trainer.detect_anomaly is True
    fast = compose_cfg(["debug=fast"], tmp_path)
    assert fast.trainer.fast_dev_run == 3 and not fast.logger and fast.callbacks.last_checkpoint is None


def test_modular_data_sizes_the_default_model_for_its_task(tmp_path):
    for model in ("gpt", "encdec", "bert"):
        cfg = compose_cfg([f"model={model}", "data=modular"], tmp_path)
        assert (cfg.model.n_layer, cfg.model.n_embd, cfg.trainer.val_check_interval) == (2, 128, 100)
    assert compose_cfg(["data=modular", "model.n_layer=3"], tmp_path).model.n_layer == 3  # the command line decides
    assert compose_cfg(["experiment=grokking"], tmp_path).model.n_layer == 1  # and a preset
    assert compose_cfg([], tmp_path).model.n_layer == 6  # other data: the model's own defaults


def test_a_models_yaml_keeps_its_sizes_on_modular_data(tmp_path):
    # The data suggests sizes (data.model_defaults) only for the settings a model leaves at their defaults.
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "narrow.yaml").write_text(
        "defaults:\n  - /schema/model@_here_: gpt\n  - /task@_global_.task: lm\n  - _self_\nname: narrow\nn_embd: 64\n"
    )
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    cfg = compose_cfg(["model=narrow", "data=modular", searchpath], tmp_path)
    assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) == (2, 4, 64)  # its YAML's n_embd wins
    cfg = compose_cfg(["model=narrow", "data=modular", "data.model_defaults.n_layer=5", searchpath], tmp_path)
    assert cfg.model.n_layer == 5


def test_a_model_without_the_suggested_keys_takes_those_its_dataclass_has():
    from dataclasses import dataclass

    from omegaconf import OmegaConf

    from transformer_lab.run.build import suggested_by_data

    @dataclass
    class Recurrent:
        vocab_size: int = 0
        n_embd: int = 32
        cell: str = "gru"

    cfg = OmegaConf.create({"data": {"model_defaults": {"n_layer": 2, "n_head": 4, "n_embd": 128}}})
    assert suggested_by_data(Recurrent, cfg, {"cell": "gru"}) == {"n_embd": 128}  # no n_layer, n_head: not given
    assert suggested_by_data(Recurrent, cfg, {"n_embd": 48}) == {}  # its YAML's value wins


def test_the_bases_name_every_attribute_read_from_a_dataset_and_from_a_tasks_batches():
    """A dataset of one's own written to data/base.py's contract, and a batch transform written to
    batching/base.py's, have whatever the code reads from them."""
    import re

    import lightning as L

    src = ROOT / "src" / "transformer_lab"
    for base, where, pattern, known in (  # a dataset is read by its batch transform, and through it (`.data`)
        (
            src / "data" / "base.py",
            src,
            r"\b(?:self|datamodule)\.data\.([a-z_]+)",
            {"token_streams", "pairs", "equations", "labelled", "references", "specials", "max_tokens"},
        ),
        (src / "batching" / "base.py", src, r"\bdatamodule\.(?!data\.)([a-z_]+)", {"source_input", "eos_id"}),
    ):
        read = {name for path in where.rglob("*.py") for name in re.findall(pattern, path.read_text())}
        assert known <= read, base  # (the search finds them)
        text = base.read_text()
        unnamed = [a for a in read if not re.search(rf"\b{a}\b", text) and not hasattr(L.LightningDataModule, a)]
        assert unnamed == [], base


@pytest.mark.parametrize(
    "override, message",
    [
        ("task.batches.text=nope.Windows", "task.batches.text: cannot import 'nope.Windows': No module named 'nope'"),
        (
            "task.batches.text=transformer_lab.tasks.metrics.Bleu",
            "task.batches.text: 'transformer_lab.tasks.metrics.Bleu' is not a subclass of "
            "transformer_lab.batching.base.Batching",
        ),
        ("task.metrics.text=[nope.Samples]", "task.metrics.text[0]: cannot import 'nope.Samples'"),
        (
            "task.metrics.text=[transformer_lab.tasks.metrics.TextSamples,transformer_lab.batching.windows.TextWindows]",
            "task.metrics.text[1]: 'transformer_lab.batching.windows.TextWindows' is not a subclass of "
            "transformer_lab.tasks.metrics.Metric",
        ),
    ],
)
def test_a_task_yamls_batches_and_metrics_are_checked_before_the_run(tmp_path, override, message):
    from transformer_lab.config.classes import check_buildable
    from transformer_lab.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        check_buildable(compose_cfg(["model=gpt", "data=shakespeare", override], tmp_path))
    assert str(refused.value).startswith(message)


NO_GENERATE = """
from dataclasses import dataclass
from torch import nn


@dataclass
class BareConfig:
    vocab_size: int = 0
    n_embd: int = 8


class Bare(nn.Module):
    architecture = "decoder"
    config_class = BareConfig

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.vocab_size)

    def forward(self, idx):
        return self.embed(idx)
"""


@pytest.mark.parametrize(
    "overrides, lacks",
    [
        (
            ["data=shakespeare"],
            "data=shakespeare: forward_flops() (callbacks.throughput=null does without it), "
            "generate() (task.sample.enabled=false does without it)",
        ),
        (["data=shakespeare", "task.sample.enabled=false", "callbacks.throughput=null"], None),
        (
            ["data=translation", "callbacks.throughput=null", "task.decode.beam_size=1"],
            "data=translation: generate() (needed)",
        ),
        (
            ["data=translation", "callbacks.throughput=null", "task.decode.beam_size=4"],
            "data=translation: generate() (needed), "
            "new_cache() (task.decode.beam_size=1 task.decode.val_beam_size=1 does without it)",
        ),
        (["data=modular", "callbacks.throughput=null"], None),  # answer accuracy calls nothing more
    ],
)
def test_what_a_task_calls_on_a_model_is_checked_before_the_run(tmp_path, monkeypatch, overrides, lacks):
    from transformer_lab.config.classes import check_buildable
    from transformer_lab.errors import ConfigError

    (tmp_path / "bare.py").write_text(NO_GENERATE)
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "bare.yaml").write_text(
        "defaults:\n  - /task@_global_.task: lm\n  - _self_\n_target_: bare.Bare\nname: bare\nn_embd: 8\ncompile: false\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_cfg(["model=bare", *overrides, f"hydra.searchpath=[file://{tmp_path / 'conf'}]"], tmp_path)
    if lacks is None:
        check_buildable(cfg)
        return
    with pytest.raises(ConfigError) as error:
        check_buildable(cfg)
    assert str(error.value) == f"model: model=bare (Bare) lacks what task=lm calls on it with {lacks}"


def test_hydras_flags_and_their_values_are_no_overrides():
    from transformer_lab.config.command_line import command_overrides, searchpath_problem

    assert command_overrides(["--cfg", "job", "model.bogus=1", "-m", "seed=1,2", "-cn", "train"]) == [
        "model.bogus=1",
        "seed=1,2",
    ]
    assert searchpath_problem(["hydra.searchpath=[file:///no/such/folder]"]) == (
        "hydra.searchpath: /no/such/folder is not a folder (of config groups: model/, data/, ...)"
    )
    assert searchpath_problem([f"hydra.searchpath=[file://{ROOT / 'conf'},pkg://x]"]) is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.model_defaults.n_layer=-1"], "data.model_defaults.n_layer: must be an integer >= 1, got -1"),
        (["data.model_defaults.n_embd=130"], "data.model_defaults.n_embd: 130 is not divisible by model.n_head=4"),
        (["model.n_layer=-1"], "model.n_layer: must be an integer >= 1, got -1"),  # set by hand: its own name
    ],
)
def test_a_bad_suggestion_is_named_where_it_was_written(tmp_path, overrides, message):
    from transformer_lab.config.checks import validate
    from transformer_lab.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        validate(compose_cfg(["data=modular", *overrides], tmp_path))
    assert str(error.value) == message
