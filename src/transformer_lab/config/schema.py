"""Structured-config schemas: the types and defaults of every key in conf/.

Each YAML option in conf/ starts from one of these schemas (its defaults list names it), so a
wrong type or an unknown key is rejected while Hydra composes, before anything runs. Value checks
that need more than a type are each section's dataclass's (`__post_init__`: OptimConfig here, a model's in
models/configs.py, ...); checks across sections, and of conf/train.yaml's own keys, are in `config/checks.py`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from transformer_lab.choices import check_ranges, choice, within
from transformer_lab.data.configs import (
    DATA_DECIDED,
    LabelledConfig,
    ModularConfig,
    RepeatsConfig,
    ShakespeareConfig,
    TextConfig,
    TranslationConfig,
)
from transformer_lab.errors import ConfigError, require
from transformer_lab.models.configs import BertConfig, EncDecConfig, GPTConfig, T5Config
from transformer_lab.tasks.configs import (
    ClassifyConfig,
    LanguageModelConfig,
    MaskedLMConfig,
    Seq2SeqConfig,
    SpanCorruptionConfig,
)

CONF = Path(__file__).resolve().parents[3] / "conf"  # the repository's config groups

# The options of the model, data and task groups this repository ships, in one place: the class each builds
# (its `_target_`) and the dataclass of its settings, which needs no torch (tests/unit/test_config.py checks
# that each class declares that dataclass as its `config_class`). A user's own option names its class in its
# YAML alone. (The Transformers families init_from=hf: reads are pretrained/load.py's FAMILIES: their tables
# need torch.) A model's YAML names its default task; `task=NAME` picks another; config.classes.form_read is where
# a task, its batch transform and a dataset meet.
MODELS = {
    "gpt": ("transformer_lab.models.gpt.GPT", GPTConfig),
    "encdec": ("transformer_lab.models.encdec.EncDec", EncDecConfig),
    "bert": ("transformer_lab.models.bert.Bert", BertConfig),
    "t5": ("transformer_lab.models.t5.T5", T5Config),
}
DATA = {
    "shakespeare": ("transformer_lab.data.shakespeare.ShakespeareData", ShakespeareConfig),
    "modular": ("transformer_lab.data.modular.ModularData", ModularConfig),
    "repeats": ("transformer_lab.data.repeats.RepeatsData", RepeatsConfig),
    "translation": ("transformer_lab.data.translation.TranslationData", TranslationConfig),
    "text": ("transformer_lab.data.corpus.TextCorpus", TextConfig),
    "labelled": ("transformer_lab.data.labelled.LabelledText", LabelledConfig),
}
TASKS = {
    "lm": ("transformer_lab.tasks.lm.LanguageModelTask", LanguageModelConfig),
    "seq2seq": ("transformer_lab.tasks.seq2seq.Seq2SeqTask", Seq2SeqConfig),
    "classify": ("transformer_lab.tasks.classify.ClassificationTask", ClassifyConfig),
    "spans": ("transformer_lab.tasks.span_corruption.SpanCorruptionTask", SpanCorruptionConfig),
    "mlm": ("transformer_lab.tasks.masked_lm.MaskedLMTask", MaskedLMConfig),
}
# A class (`_target_`) -> the dataclass of its settings, to check them before any heavy import (config/checks.py).
SETTINGS = {target: config_class for target, config_class in (*MODELS.values(), *DATA.values(), *TASKS.values())}


def is_seed(key: str) -> bool:
    """A setting that only seeds randomness: `seed`, or a section's (data.seed, task.sample.seed); runs that
    differ only in these are one configuration's repeats (compare averages them; W&B's job_type omits them)."""
    return key == "seed" or key.endswith(".seed")


def suggested(key: str, default) -> str:
    """A model's numeric setting left at its default, `${suggested:KEY,DEFAULT}`: the data's suggestion,
    `data.model_defaults.KEY` (data=modular: a 2 x 128 GPT for 4-token equations), else the default. A value in
    the model's YAML, an experiment or the command line replaces this whole expression, so it always wins; a
    model without the key never sees the suggestion (run.build.build_model gives it to a user's model that leaves
    the key out)."""
    return f"${{suggested:{key},{default}}}"


def data_suggestion(key: str, default, *, _root_):
    return OmegaConf.select(_root_, f"data.model_defaults.{key}", default=default)


def _schema(name: str, target: str, config_class: type, model: bool, data: bool = False) -> type:
    """A model, data or task option's schema: the settings dataclass's fields (for a model, less what the data decides;
    block_size, where the model has one, becomes an optional maximum), the class it builds (`_target_`)
    and the option's name."""
    hints = typing.get_type_hints(config_class)
    fields = [("_target_", str, field(default=target)), ("name", str, field(default=name))]
    if model and "block_size" in hints:
        fields.append(("block_size", Optional[int], field(default=None)))  # None: the data's sequence length
    for f in dataclasses.fields(config_class):
        if not (model and f.name in DATA_DECIDED):
            default = (
                field(default=f.default) if f.default_factory is MISSING else field(default_factory=f.default_factory)
            )
            if model and hints[f.name] in (int, float) and f.default_factory is MISSING:
                default = field(default=suggested(f.name, f.default))
            fields.append((f.name, hints[f.name], default))
    if model:
        fields.append(("compile", bool, field(default=False)))  # torch.compile the model (in place)
    if data:  # the settings it suggests to a model that leaves them at their defaults (see suggested)
        fields.append(("model_defaults", Dict[str, Any], field(default_factory=dict)))
    return dataclasses.make_dataclass(f"{config_class.__name__}Schema", fields)


@dataclass
class TrainerConfig:
    """Keyword arguments of lightning.Trainer that runs may turn."""

    accelerator: str = "auto"
    devices: Any = "auto"
    num_nodes: int = 1
    strategy: str = "auto"
    precision: Any = "32-true"
    max_steps: int = 5000
    max_epochs: int = -1
    max_time: Optional[str] = None  # a wall-clock budget for training, "DD:HH:MM:SS"
    val_check_interval: Any = 250  # steps (int) or a fraction of an epoch (float)
    check_val_every_n_epoch: Optional[int] = within(None, "[1, inf)")
    limit_val_batches: Any = 20  # batches (int) or a fraction (float) of the validation set
    limit_train_batches: Any = None
    limit_test_batches: Any = None  # batches (int) or a fraction (float) of the test set; None: all
    num_sanity_val_steps: int = within(2, "[-1, inf)")  # -1: the whole validation set
    log_every_n_steps: int = within(10, "[1, inf)")
    gradient_clip_val: Optional[float] = within(1.0, "[0, inf)")
    accumulate_grad_batches: int = within(1, "[1, inf)")
    deterministic: Any = False
    benchmark: Optional[bool] = None
    enable_progress_bar: bool = True
    enable_model_summary: bool = True
    # debugging (conf/debug/: debug=fast, overfit, profile, anomaly)
    fast_dev_run: Any = False  # N (or true: 1) batches of training, validation and test; no checkpoints, no logger
    overfit_batches: Any = 0  # train (and validate) on the first N batches (int) or fraction (float), again and again
    profiler: Any = None  # "simple", "advanced", "pytorch", or a profiler's config (_target_: ...)
    detect_anomaly: bool = False  # torch.autograd's anomaly detection: the op that made a nan, named

    def __post_init__(self):
        # values Lightning takes and fails on later (what it refuses at once, config/trainer.check_trainer finds)
        check_ranges(self)
        require(
            self.max_steps == -1 or self.max_steps >= 1,
            "max_steps",
            f"must be -1 (no limit) or positive, got {self.max_steps}",
        )
        require(
            self.deterministic in (True, False, "warn"),
            "deterministic",
            f"must be true, false or warn, got {self.deterministic!r}",
        )
        for key in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "overfit_batches"):
            value = getattr(self, key)
            require(
                value is None
                or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
                or (isinstance(value, float) and 0 <= value <= 1),
                key,
                f"must be a number of batches (an integer >= 0) or a fraction in [0.0, 1.0], got {value!r}",
            )
        vci = self.val_check_interval
        require(
            isinstance(vci, (int, float)) and vci > 0,
            "val_check_interval",
            f"must be a positive number of steps (int) or fraction of an epoch (float), got {vci!r}",
        )


# optim.name: built in tasks/base.py's configure_optimizers
Optimizer = choice("Optimizer", "adamw", "adafactor", "muon")
# optim.muon_shape_scaling: torch.optim.Muon's adjust_lr_fn (how an update's size follows its matrix's shape)
MuonShapeScaling = choice("MuonShapeScaling", "original", "match_rms_adamw")
# optim.muon_precision: the dtype of Muon's Newton-Schulz iteration (default: what the run's device does fast)
MuonPrecision = choice("MuonPrecision", "bfloat16", "float32")


@dataclass
class OptimConfig:
    # adamw | adafactor (relative steps, T5's optimizer: lr is relative, e.g. 1e-2; betas, eps, fused unused) |
    # muon (torch's Muon on the hidden matrices at muon_lr, AdamW on the rest at lr: tasks/optim.py)
    name: Optimizer = Optimizer.adamw
    lr: float = within(1e-3, "(0, inf)")  # peak learning rate, reached after warmup
    min_lr: float = 1e-4  # where the cosine decay ends
    warmup_steps: int = within(100, "[0, inf)")
    decay_steps: Optional[int] = within(None, "[1, inf)")  # default: trainer.max_steps
    weight_decay: float = within(0.1, "[0, inf)")  # on matrices only; biases and norm gains never decay
    betas: List[float] = field(default_factory=lambda: [0.9, 0.99])
    eps: float = 1e-8
    fused: Optional[bool] = True  # torch's fused AdamW kernel (CUDA and CPU); null lets torch choose
    skip_nonfinite: bool = False  # on an inf/nan loss: false stops the run, true skips the step (counted)
    # with init_from: peak lr of the loaded tensors (null: lr, as the rest)
    pretrained_lr: Optional[float] = within(None, "(0, inf)")
    # optim.name=muon: peak lr of the hidden matrices (the schedule scales it as lr)
    muon_lr: float = within(0.02, "(0, inf)")
    muon_momentum: float = within(0.95, "[0, 1)")  # Muon's (Nesterov) momentum
    muon_shape_scaling: MuonShapeScaling = MuonShapeScaling.original  # Keller Jordan's, or Moonshot's
    # the hidden matrices' decoupled decay (each step shrinks them by lr x decay: at Muon's larger lr one decay for
    # both optimizers decays Muon's matrices more); null: weight_decay. (Unused by adamw, as every muon_ key.)
    muon_weight_decay: Optional[float] = within(None, "[0, inf)")
    # Newton-Schulz in bfloat16 (torch's Muon) where the device has bf16 units (CUDA; a CPU with AMX or AVX512-BF16),
    # float32 elsewhere: emulated bf16 took 3x float32's time there (issue #67). Resolved as the run is composed.
    muon_precision: MuonPrecision = "${fast_precision:${trainer.accelerator}}"  # type: ignore[assignment]

    def __post_init__(self):
        check_ranges(self)
        require(0 <= self.min_lr <= self.lr, "min_lr", f"must be in [0, optim.lr={self.lr}], got {self.min_lr}")
        require(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "betas",
            f"must be two numbers in [0, 1), got {list(self.betas)}",
        )


def tasks_per_node(devices) -> int:
    """hydra/launcher=slurm's task count: one task per device, so trainer.devices must be a number. Resolved
    while Hydra builds the launcher: the mistake reaches the command line's error line (commands/train.py composition_problem)."""
    if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1:
        return devices
    raise ConfigError(
        "trainer.devices",
        "hydra/launcher=slurm and slurm_local start one task (one process) "
        f"per device on each node, so they need a number of devices, 1 or more, got {devices!r}: "
        "add trainer.devices=N",
    )


def cpu_has_bf16_units() -> bool:
    """Whether this CPU computes in bfloat16 natively (AMX or AVX512-BF16 on x86, from /proc/cpuinfo's flags). Without
    them torch emulates it: bf16 autocast made a training step 20x slower than float32 on a 2-core AVX2 EPYC."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:  # not Linux: no way to tell here, so no
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cpu_precision() -> str:
    """hardware=cpu_bf16's precision: bf16 autocast where the CPU has bf16 units, float32 where it has not."""
    return "bf16-mixed" if cpu_has_bf16_units() else "32-true"


def fast_precision(accelerator) -> str:
    """`${fast_precision:${trainer.accelerator}}`: bfloat16 where the run's device computes it natively (a CUDA GPU;
    a CPU with bf16 units, as hardware=cpu_bf16 decides), float32 elsewhere. (auto: torch is asked for a GPU only
    where the CPU has no bf16 units.)"""
    if str(accelerator) in ("gpu", "cuda") or cpu_has_bf16_units():
        return "bfloat16"
    if str(accelerator) == "auto":
        import torch

        return "bfloat16" if torch.cuda.is_available() else "float32"
    return "float32"


def if_bf16(precision, with_bf16, without):
    """`${if_bf16:${trainer.precision},A,B}`: A when the run computes in bf16, else B (a setting tuned for bf16:
    shakespeare_char_cpu's attention kernel)."""
    return with_bf16 if str(precision).startswith("bf16") else without


# attention_kernel's choices but auto (torch picks), and the torch.nn.attention.SDPBackend member each names
ATTENTION_KERNELS = {
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}
AttentionKernel = choice("AttentionKernel", "auto", *ATTENTION_KERNELS)


@dataclass
class RunConfig:
    """conf/train.yaml's own keys (what they mean: its comments) and its sections, each of which has its own schema or
    is its option's: a wrong type is refused while Hydra composes. A key added with `+` (Hydra adds it whatever the
    schema), the ranges and the checks across keys: config/checks.py validate."""

    seed: int = 1337
    ckpt_path: Optional[str] = None
    overwrite: Any = False  # (true or false only, checked in config/checks.py: OmegaConf's bool takes 2 and "yes")
    init_from: Optional[str] = None
    init_strict: bool = False
    model_sizes: Any = None  # (checked in config/checks.py: OmegaConf cannot merge into an Optional[Dict] that is null)
    attention_kernel: AttentionKernel = AttentionKernel("auto")
    objective: Optional[str] = None
    model: Any = None
    data: Any = None
    task: Any = None
    trainer: Any = None
    optim: Any = None
    logger: Any = None
    callbacks: Any = None
    paths: Any = None


def register() -> None:
    OmegaConf.register_new_resolver("cpu_precision", cpu_precision, replace=True)
    OmegaConf.register_new_resolver("if_bf16", if_bf16, replace=True)
    OmegaConf.register_new_resolver("fast_precision", fast_precision, replace=True)
    OmegaConf.register_new_resolver("suggested", data_suggestion, replace=True)
    OmegaConf.register_new_resolver("tasks_per_node", tasks_per_node, replace=True)
    cs = ConfigStore.instance()
    # Kept out of the data/ and model/ groups, so `--help` and error messages list only real options.
    for name, (target, config_class) in DATA.items():
        cs.store(group="schema/data", name=name, node=_schema(name, target, config_class, model=False, data=True))
    for name, (target, config_class) in MODELS.items():
        cs.store(group="schema/model", name=name, node=_schema(name, target, config_class, model=True))
    cs.store(name="run_schema", node=RunConfig)
    cs.store(name="trainer_schema", node=TrainerConfig, package="trainer")
    cs.store(name="optim_schema", node=OptimConfig, package="optim")
    for name, (target, config_class) in TASKS.items():
        cs.store(group="schema/task", name=name, node=_schema(name, target, config_class, model=False))


register()
