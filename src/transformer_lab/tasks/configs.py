"""The settings of each training objective (the `task` group, conf/task/): types, defaults and checks,
importable without torch, so a command line is composed and checked before anything heavy loads. A task's
YAML holds only what that objective uses: `python train.py --cfg job` for a GPT shows its samples, not span
corruption. Checks that relate these keys live here, in `__post_init__`."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformer_lab.batching.span_lengths import num_noise_spans, raw_and_target_length
from transformer_lab.choices import check_ranges, within
from transformer_lab.errors import require, under


@dataclass
class SampleConfig:
    """Text samples at each validation of a language model on text."""

    enabled: bool = True  # print (and log to W&B) a text sample at each validation
    max_new_tokens: int = within(200, "[1, inf)")
    temperature: float = within(0.8, "[0, inf)")
    top_k: int | None = within(200, "[1, inf)")
    seed: int = 0

    __post_init__ = check_ranges


@dataclass
class DecodeConfig:
    """How outputs are produced for BLEU (validation, test, the translate command)."""

    beam_size: int = within(4, "[1, inf)")  # for test/bleu and the translate command; 1 is greedy
    val_beam_size: int = within(1, "[1, inf)")  # for val/bleu at each validation (greedy keeps validation fast)
    length_penalty: float = within(0.6, "[0, inf)")  # GNMT's alpha; 0 ranks finished outputs by raw log-probability
    max_extra_len: int = within(50, "[1, inf)")  # an output may be this many tokens longer than its source

    __post_init__ = check_ranges


def _section(value, cls: type, key: str):
    """A nested section as its dataclass (Hydra hands it over as a dict); its errors named under `key`."""
    if isinstance(value, cls):
        return value
    with under(key):
        return cls(**value)


@dataclass
class TaskConfig:
    """What every task's YAML names, per form of a dataset's raw splits (data/base.py: text, pairs, equations):
    the batch transform that makes its batches of that form (batching/), and the metrics its evaluation shows
    beyond the loss (tasks/metrics.py). A dataset trains with a task when it provides a form the
    task has batches for (the first it provides)."""

    batches: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, str | None] = field(default_factory=dict)  # noqa: UP007 (OmegaConf reads typing's)


@dataclass
class LanguageModelConfig(TaskConfig):  # tasks/lm.py: next-token loss (text, equations' answers, a prefix LM)
    sample: SampleConfig = field(default_factory=SampleConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # translation as a prefix LM

    def __post_init__(self):
        self.sample = _section(self.sample, SampleConfig, "sample")
        self.decode = _section(self.decode, DecodeConfig, "decode")


@dataclass
class Seq2SeqConfig(TaskConfig):  # tasks/seq2seq.py: teacher-forced target loss; BLEU or answer accuracy
    label_smoothing: float = within(0.1, "[0, 1)")  # of the training loss; val/loss and test/loss are the plain one
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self):
        check_ranges(self)
        self.decode = _section(self.decode, DecodeConfig, "decode")


@dataclass
class ClassifyConfig(TaskConfig):  # tasks/classify.py: one class per sequence, from the pooled encoder output
    pass


@dataclass
class SpanCorruptionConfig(
    TaskConfig
):  # tasks/span_corruption.py: T5's objective (batching/span_corruption.py); T5's defaults
    input_length: int = within(128, "[4, inf)")  # corrupted input tokens, EOS included (raw windows: 128 <- 141)
    noise_density: float = within(0.15, "(0, 1)")  # share of a window's tokens dropped
    mean_noise_span_length: float = within(3.0, "[1, inf)")
    extra_ids: int = 100  # sentinel tokens, at the top of the vocabulary

    def __post_init__(self):
        check_ranges(self)
        raw, _ = raw_and_target_length(self.input_length, self.noise_density, self.mean_noise_span_length)
        spans = num_noise_spans(raw, self.noise_density, self.mean_noise_span_length)
        require(
            self.extra_ids >= spans,
            "extra_ids",
            f"windows of {raw} tokens have {spans} noise spans, each needing a sentinel; got {self.extra_ids}",
        )


@dataclass
class MaskedLMConfig(TaskConfig):  # tasks/masked_lm.py: BERT's objective (batching/masked_lm.py); BERT's defaults
    length: int = within(128, "[2, inf)")  # tokens per sequence, [CLS] included (and a token at least)
    mask_prob: float = within(0.15, "(0, 1]")  # share of tokens chosen for prediction (the loss is on these only)
    mask_token_prob: float = within(0.8, "[0, 1]")  # of the chosen: replaced by [MASK]
    random_token_prob: float = within(0.1, "[0, 1]")  # replaced by a random token; the rest are kept as they are

    def __post_init__(self):
        check_ranges(self)
        require(
            self.mask_token_prob + self.random_token_prob <= 1,
            "random_token_prob",
            "mask_token_prob + random_token_prob must be at most 1, got "
            f"{self.mask_token_prob + self.random_token_prob}",
        )
