"""Checks of a composed config that need more than a type. Each failure names the key and what is valid.

Runs before any data is read or any model built. Types and unknown keys were already checked by the
schemas in config.py while Hydra composed the config.
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig, OmegaConf

from transformer_lab.data.modular import OPS, is_prime
from transformer_lab.data.span_corruption import num_noise_spans, raw_and_target_length
from transformer_lab.data.translation import LANGUAGES
from transformer_lab.errors import ConfigError

def _gpu_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "none"


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(key, message)


def _positive(cfg: DictConfig, section: str, key: str) -> None:
    value = cfg[section][key]
    _require(isinstance(value, int) and value >= 1, f"{section}.{key}", f"must be a positive integer, got {value!r}")


def check_pair(cfg: DictConfig, datamodule) -> None:
    """Checks that need the data module (built, not set up) beside the config: its sequences fit the
    model's block_size, and an endless stream of training windows has a step limit."""
    trainer, block_size = cfg.trainer, cfg.model.get("block_size")
    if block_size is not None and datamodule.sequence_length is not None:
        _require(datamodule.sequence_length <= block_size, f"data.{datamodule.length_key}",
                 f"sequences of {datamodule.sequence_length} tokens exceed the model's maximum, "
                 f"model.block_size={block_size}")
    if datamodule.endless:  # random windows without end: only steps end it
        what = f"model={cfg.model.name}" if datamodule.layout == "spans" else f"data={cfg.data.name}"
        _require(trainer.max_steps >= 1, "trainer.max_steps", f"must be set: {what} draws random windows without end")
        _require(isinstance(trainer.val_check_interval, int), "trainer.val_check_interval",
                 f"must be a number of steps with {what}, got {trainer.val_check_interval!r}")
    elif trainer.max_steps == -1:
        _require(trainer.max_epochs >= 1, "trainer.max_epochs", "set trainer.max_steps or trainer.max_epochs")


def validate(cfg: DictConfig) -> None:
    data, model, trainer, optim, sample = cfg.data, cfg.model, cfg.trainer, cfg.optim, cfg.sample

    # data
    _positive(cfg, "data", "batch_size")
    _require(data.val_batch_size is None or data.val_batch_size >= 1, "data.val_batch_size",
             f"must be a positive integer or null, got {data.val_batch_size!r}")
    if data.name == "shakespeare":
        _positive(cfg, "data", "block_size")
        _require(0 < data.val_fraction < 1, "data.val_fraction", f"must be in (0, 1), got {data.val_fraction}")
    if data.name == "modular":
        _require(is_prime(data.p), "data.p", f"must be a prime (division needs inverses), got {data.p}")
        _require(data.op in OPS, "data.op", f"must be one of {' '.join(OPS)}, got {data.op!r}")
        _require(data.terms >= 2, "data.terms", f"must be at least 2, got {data.terms}")
        _require(0 < data.train_fraction < 1, "data.train_fraction",
                 f"must be in (0, 1), got {data.train_fraction}")

    if data.name == "translation":
        if data.path is None:
            for key in ("source", "target"):
                _require(data[key] in LANGUAGES, f"data.{key}",
                         f"Multi30k has {', '.join(LANGUAGES)}; got {data[key]!r} (or give data.path=FILE)")
            _require(data.source != data.target, "data.target", f"is the same language as data.source ({data.source})")
        for key in ("val_fraction", "test_fraction"):
            _require(0 < data[key] < 0.5, f"data.{key}", f"must be in (0, 0.5), got {data[key]}")
        _require(data.vocab_size >= 100, "data.vocab_size", f"must be at least 100, got {data.vocab_size}")
        _require(data.shared_vocab or model.name != "gpt", "data.shared_vocab",
                 "model=gpt reads source and target as one sequence, so it needs one vocabulary (true)")
        _require(data.max_length >= 4, "data.max_length", f"must be at least 4, got {data.max_length}")

    # model: the keys every transformer here has, where a model (a user's own, say) has them
    for key in ("n_layer", "n_head", "n_embd"):
        if key in model:
            _positive(cfg, "model", key)
    if "n_embd" in model and "n_head" in model:
        _require(model.n_embd % model.n_head == 0, "model.n_embd",
                 f"{model.n_embd} is not divisible by model.n_head={model.n_head}")
    if "dropout" in model:
        _require(0 <= model.dropout < 1, "model.dropout", f"must be in [0, 1), got {model.dropout}")
    if model.name == "gpt":
        _require(model.pos_encoding in ("learned", "rope"), "model.pos_encoding",
                 f"must be learned or rope, got {model.pos_encoding!r}")
        if model.pos_encoding == "rope":
            _require((model.n_embd // model.n_head) % 2 == 0, "model.n_embd",
                     f"rope needs an even head size, n_embd/n_head = {model.n_embd // model.n_head}")
        _require(model.mlp in ("gelu", "relu", "swiglu"), "model.mlp",
                 f"must be gelu, relu or swiglu, got {model.mlp!r}")
        _require(model.init_std is None or model.init_std > 0, "model.init_std",
                 f"must be positive or null (1/sqrt(n_embd)), got {model.init_std}")
        _require(model.norm in ("layernorm", "none"), "model.norm", f"must be layernorm or none, got {model.norm!r}")
    if model.name == "encdec":
        _require(model.pos_encoding in ("sinusoidal", "learned"), "model.pos_encoding",
                 f"must be sinusoidal or learned, got {model.pos_encoding!r}")
        _require(model.n_embd % 2 == 0, "model.n_embd", f"sinusoidal positions need an even width, got {model.n_embd}")
        for key in ("n_decoder_layer", "d_ff"):
            _require(model[key] is None or model[key] >= 1, f"model.{key}", f"must be positive or null, got {model[key]}")
    if model.name == "bert":
        _require(model.pooling in ("cls", "mean"), "model.pooling", f"must be cls or mean, got {model.pooling!r}")
        _require(model.d_ff is None or model.d_ff >= 1, "model.d_ff", f"must be positive or null, got {model.d_ff}")
    if model.name == "t5":
        _require(model.feed_forward in ("relu", "gated-gelu"), "model.feed_forward",
                 f"must be relu or gated-gelu, got {model.feed_forward!r}")
        _require(model.d_ff >= 1, "model.d_ff", f"must be positive, got {model.d_ff}")
        _require(model.num_buckets >= 4 and model.max_distance > model.num_buckets // 2, "model.num_buckets",
                 f"needs num_buckets >= 4 and max_distance > num_buckets / 2, got {model.num_buckets} and "
                 f"{model.max_distance}")
        span = cfg.span
        _require(0 < span.noise_density < 1, "span.noise_density", f"must be in (0, 1), got {span.noise_density}")
        _require(span.mean_noise_span_length >= 1, "span.mean_noise_span_length",
                 f"must be at least 1, got {span.mean_noise_span_length}")
        _require(span.input_length >= 4, "span.input_length", f"must be at least 4, got {span.input_length}")
        raw, _ = raw_and_target_length(span.input_length, span.noise_density, span.mean_noise_span_length)
        spans = num_noise_spans(raw, span.noise_density, span.mean_noise_span_length)
        _require(span.extra_ids >= spans, "span.extra_ids",
                 f"windows of {raw} tokens have {spans} noise spans, each needing a sentinel; got {span.extra_ids}")

    # optimisation
    _require(optim.lr > 0, "optim.lr", f"must be positive, got {optim.lr}")
    _require(0 <= optim.min_lr <= optim.lr, "optim.min_lr", f"must be in [0, optim.lr={optim.lr}], got {optim.min_lr}")
    _require(optim.warmup_steps >= 0, "optim.warmup_steps", f"must be >= 0, got {optim.warmup_steps}")
    _require(optim.weight_decay >= 0, "optim.weight_decay", f"must be >= 0, got {optim.weight_decay}")
    _require(0 <= optim.label_smoothing < 1, "optim.label_smoothing",
             f"must be in [0, 1), got {optim.label_smoothing}")
    _require(len(optim.betas) == 2 and all(0 <= b < 1 for b in optim.betas), "optim.betas",
             f"must be two numbers in [0, 1), got {list(optim.betas)}")

    # trainer
    _require(trainer.max_steps == -1 or trainer.max_steps >= 1, "trainer.max_steps",
             f"must be -1 (no limit) or positive, got {trainer.max_steps}")
    vci = trainer.val_check_interval
    _require(isinstance(vci, (int, float)) and vci > 0, "trainer.val_check_interval",
             f"must be a positive number of steps (int) or fraction of an epoch (float), got {vci!r}")

    _require(trainer.accelerator not in ("gpu", "cuda") or torch.cuda.is_available(), "hardware",
             f"trainer.accelerator={trainer.accelerator} asks for a CUDA GPU but torch sees none "
             f"(torch {torch.__version__}, torch.cuda.is_available() is False); use hardware=cpu or hardware=auto")

    precision = str(trainer.precision)
    on_gpu = trainer.accelerator in ("gpu", "cuda") or (trainer.accelerator == "auto" and torch.cuda.is_available())
    _require(not precision.startswith("16") or on_gpu, "hardware",
             f"fp16 (trainer.precision={precision}) needs a CUDA GPU: on the CPU Lightning would quietly use bf16 "
             "instead; use hardware=bf16 there")
    _require(not precision.startswith("bf16") or not on_gpu or torch.cuda.is_bf16_supported(), "hardware",
             f"bf16 (trainer.precision={precision}) is not supported by this GPU ({_gpu_name()}); use hardware=fp16")

    peak = OmegaConf.select(cfg, "callbacks.throughput.peak_flops")
    _require(peak is None or (isinstance(peak, (int, float)) and peak > 0), "callbacks.throughput.peak_flops",
             f"must be a positive number of FLOP/s (e.g. 989e12) or null, got {peak!r}")

    # decoding
    decode = cfg.decode
    for key in ("beam_size", "val_beam_size", "max_extra_len"):
        _require(decode[key] >= 1, f"decode.{key}", f"must be at least 1, got {decode[key]}")
    _require(decode.length_penalty >= 0, "decode.length_penalty", f"must be >= 0, got {decode.length_penalty}")

    # samples
    _require(sample.temperature >= 0, "sample.temperature", f"must be >= 0, got {sample.temperature}")
    _require(sample.top_k is None or sample.top_k >= 1, "sample.top_k", f"must be >= 1 or null, got {sample.top_k}")
