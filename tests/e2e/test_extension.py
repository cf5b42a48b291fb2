"""A user's own model and dataset, each one Python file and one YAML outside the repository (README: "Your
own model or dataset"), trained through train.py with no edit to src/.

Here: their runs through train.py; tests/unit/test_extension.py has the rest."""

import json
import math
import os
import textwrap

import pytest

from helpers.docs import documented_files
from helpers.runs import ROOT, needs_shakespeare, run_command, run_train

MODEL = '''
"""A GRU language model: no attention; from transformer_lab only what checks its settings."""
from dataclasses import dataclass

import torch
from torch import nn


from transformer_lab.choices import choice
from transformer_lab.errors import ConfigError

Cell = choice("Cell", "gru", "lstm")


@dataclass
class TinyGRUConfig:
    vocab_size: int = 0  # the data decides these two
    block_size: int = 0
    n_embd: int = 32
    cell: Cell = Cell.gru

    def __post_init__(self):
        if self.n_embd % 2:
            raise ConfigError("n_embd", f"must be even, got {self.n_embd}")


class TinyGRU(nn.Module):
    architecture = "decoder"  # tokens -> next-token logits at every position
    config_class = TinyGRUConfig

    def __init__(self, config: TinyGRUConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.gru = (nn.GRU if config.cell == "gru" else nn.LSTM)(config.n_embd, config.n_embd, batch_first=True)
        self.head = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx):
        return self.head(self.gru(self.embed(idx))[0])  # (B, T, V)

    def forward_flops(self, T: int) -> int:
        return 2 * T * sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.config.block_size:])[:, -1] / max(temperature, 1e-6)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            idx = torch.cat([idx, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
        return idx
'''

MODEL_YAML = """
defaults:
  - /task@_global_.task: lm  # trained by next-token prediction unless task=NAME says otherwise
  - _self_

_target_: mine.TinyGRU
name: mine
n_embd: 48
cell: gru
block_size: null  # the data's
"""

DATA = '''
"""Any plain text file as a character stream."""
from pathlib import Path

import torch

from transformer_lab.data.base import DataSource
from transformer_lab.data.tokens import TokenStreams


class TextFileData(DataSource):
    provides = ("text",)  # its raw splits are token streams: every task that reads text trains on it
    length_key = "block_size"

    def __init__(self, path, block_size=32, batch_size=16, val_batch_size=None, seed=0):
        self.path, self.block_size = Path(path), block_size  # (batch sizes and seed: the task's batches read them)

    def setup(self):
        text = self.path.read_text()
        self.chars = sorted(set(text))
        tokens = torch.tensor([self.chars.index(c) for c in text])
        n = int(len(tokens) * 0.9)
        self.train_tokens, self.val_tokens = tokens[:n], tokens[n:]

    @property
    def vocab_size(self):
        return len(self.chars)

    @property
    def sequence_length(self):  # of a text window
        return self.block_size

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)

    def sample_prompt_ids(self):
        return [0]

    def checkpoint_meta(self):
        return {"vocab": self.chars}

    def token_streams(self):
        return TokenStreams(self.train_tokens, self.val_tokens, self.vocab_size, decode=self.decode)
'''

TASK = '''
"""Next-token prediction with the focal loss (Lin et al. 2017): easy tokens weigh less."""
from dataclasses import dataclass

import torch.nn.functional as F

from transformer_lab.errors import require
from transformer_lab.tasks.configs import LanguageModelConfig
from transformer_lab.tasks.lm import LanguageModelTask


@dataclass
class FocalConfig(LanguageModelConfig):
    gamma: float = 2.0

    def __post_init__(self):
        super().__post_init__()
        require(self.gamma >= 0, "gamma", f"must be >= 0, got {self.gamma}")


class FocalLM(LanguageModelTask):
    config_class = FocalConfig  # (architecture: a language model's, inherited)

    def __init__(self, *args, gamma=2.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.gamma = gamma

    @classmethod
    def settings(cls, cfg, datamodule):
        return {**super().settings(cfg, datamodule), "gamma": cfg.task.gamma}

    def loss(self, logits, targets):
        logp = F.log_softmax(logits.flatten(0, 1).float(), -1)
        targets = targets.flatten()
        kept = targets != -100
        logp = logp[kept].gather(1, targets[kept, None])[:, 0]
        return -((1 - logp.exp()) ** self.gamma * logp).mean()
'''

TASK_YAML = """
_target_: focal.FocalLM
name: focal
gamma: 2.0
sample: {enabled: true, max_new_tokens: 20, temperature: 0.8, top_k: 200, seed: 0}
decode: {beam_size: 1, val_beam_size: 1, length_penalty: 0.6, max_extra_len: 50}
batches:  # per form of raw data: the language model's batch transforms (conf/task/lm.yaml)
  text: transformer_lab.batching.windows.TextWindows
  equations: transformer_lab.batching.equations.AnswerToken
metrics:
  text: [transformer_lab.tasks.metrics.TextSamples, transformer_lab.tasks.metrics.BitsPerByte]
  equations: [transformer_lab.tasks.metrics.AnswerAccuracy]
"""

DATA_YAML = """
_target_: textfile.TextFileData
name: textfile
path: {path}
block_size: 32
batch_size: 16
val_batch_size: null
seed: ${{seed}}
"""

TEXT = "the quick brown fox jumps over the lazy dog. " * 400
FAST = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "logger=csv",
    "optim.lr=3e-3",
    "optim.warmup_steps=5",
    "trainer.val_check_interval=20",
    "trainer.limit_val_batches=4",
    "trainer.log_every_n_steps=5",
]


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """The user's two Python files (a package dir on PYTHONPATH) and two YAMLs (a config dir), nothing in src/."""
    tmp = tmp_path_factory.mktemp("user")
    (tmp / "code").mkdir()
    (tmp / "code" / "mine.py").write_text(textwrap.dedent(MODEL))
    (tmp / "code" / "textfile.py").write_text(textwrap.dedent(DATA))
    (tmp / "code" / "focal.py").write_text(textwrap.dedent(TASK))
    text = tmp / "poem.txt"
    text.write_text(TEXT)
    for group, name, content in [
        ("model", "mine", MODEL_YAML),
        ("data", "textfile", DATA_YAML.format(path=text)),
        ("task", "focal", TASK_YAML),
    ]:
        (tmp / "conf" / group).mkdir(parents=True, exist_ok=True)
        (tmp / "conf" / group / f"{name}.yaml").write_text(textwrap.dedent(content))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp / "code"), os.environ.get("PYTHONPATH", "")])}
    return tmp, [f"hydra.searchpath=[file://{tmp / 'conf'}]"], env


def read_summary(run):
    return json.loads((run / "summary.json").read_text())


@needs_shakespeare
def test_own_model_trains_resumes_and_samples(user_files, tmp_path):
    user, searchpath, env = user_files
    run = tmp_path / "run"
    result = run_train(
        "model=mine",
        "data=shakespeare",
        "data.block_size=32",
        "data.batch_size=16",
        "trainer.max_steps=40",
        *FAST,
        *searchpath,
        f"hydra.run.dir={run}",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run)
    assert summary["status"] == "completed" and summary["global_step"] == 40
    assert summary["val/loss_best"] < math.log(65) - 0.5  # from chance, ln(65) = 4.17: it learns
    assert summary["n_params"] == 2 * 3 * 48 * 48 + 2 * 3 * 48 + 65 * 48 + 48 * 65 + 65  # GRU, embedding, head
    assert (run / "checkpoints" / "best.ckpt").exists() and (run / "checkpoints" / "last.ckpt").exists()

    resumed = run_train(
        "model=mine",
        "data=shakespeare",
        "data.block_size=32",
        "data.batch_size=16",
        "trainer.max_steps=60",
        *FAST,
        *searchpath,
        f"hydra.run.dir={run}",
        "ckpt_path=last",
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_summary(run)["global_step"] == 60

    sample = run_command(
        "sample", f"ckpt={run / 'checkpoints' / 'last.ckpt'}", "prompt=ROMEO:", "max_new_tokens=20", env=env
    )
    assert sample.returncode == 0, sample.stderr[-3000:]
    assert sample.stdout.startswith("ROMEO:") and len(sample.stdout.rstrip("\n")) == len("ROMEO:") + 20

    drawn = run_command("attention", run, "text=ROMEO:", env=env)
    assert drawn.returncode == 2 and drawn.stderr == (
        "error: TinyGRU has no layer with capture_attention(capture), the attention protocol (models/layers.py "
        'DrawsAttention; docs/extending.md, "Draw your own attention"): nothing to draw\n'
    )


@pytest.mark.parametrize("model", ["gpt", "t5"])
def test_own_dataset_trains_gpt_and_t5(user_files, tmp_path, model):
    user, searchpath, env = user_files
    run = tmp_path / "run"
    size = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32"]
    extra = ["task.input_length=24", "model.d_ff=64"] if model == "t5" else []
    result = run_train(
        f"model={model}",
        "data=textfile",
        *size,
        *extra,
        "trainer.max_steps=30",
        *FAST,
        *searchpath,
        f"hydra.run.dir={run}",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run)
    assert summary["status"] == "completed" and summary["global_step"] == 30
    vocab = len(set(TEXT)) + (2 + 100 if model == "t5" else 0)  # t5: <pad>, <eos> and 100 sentinels
    assert summary["val/loss_best"] < math.log(vocab) - 0.8  # from chance: it learns


def test_a_pair_that_cannot_work_lists_those_that_can(user_files, tmp_path):
    user, searchpath, env = user_files
    result = run_train("model=bert", "data=textfile", *searchpath, f"hydra.run.dir={tmp_path}", env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(
        "error: task: task=classify does not train on data=textfile (it reads equations, labelled; the data gives text); "
        "model=bert data=textfile trains with task=mlm; combinations that work:"
    )  # the user's text trains every objective that reads text: BERT's is masked LM
    for pair in (
        "model=mine data=shakespeare",
        "model=mine data=textfile",
        "model=gpt data=textfile",
        "model=t5 data=textfile",
        "model=bert data=modular",
        "model=encdec data=translation",
    ):
        assert pair in message
    # bert reads text only as a masked LM
    assert "model=bert data=shakespeare," not in message and "model=bert data=shakespeare task=mlm" in message
    assert "model=bert data=textfile task=mlm" in message and "model=mine data=translation" in message


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["model=mine", "data=shakespeare", "model.cell=rnn"],
            "error: model.cell: must be one of gru, lstm, got 'rnn'",
        ),
        (["model=mine", "data=shakespeare", "model.n_embd=33"], "error: model.n_embd: must be even, got 33"),
        (
            ["model=mine", "data=shakespeare", "model.depth=3"],
            "error: model.depth: no such key; model has: _target_, name, n_embd, cell, block_size (a setting of "
            "mine.TinyGRU that its YAML leaves out is given with +model.depth=VALUE, or listed in the YAML)",
        ),
        (
            ["model=gpt", "data=textfile", "+data.foo=1", "logger=none"],
            "error: data.foo: no such key; data has: path, block_size, batch_size, val_batch_size, seed",
        ),
    ],
    ids=["model-choice", "model-check", "model-key", "data-key"],
)
def test_own_classes_check_their_settings_before_anything_runs(user_files, tmp_path, overrides, message):
    user, searchpath, env = user_files
    result = run_train(*overrides, *searchpath, f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == message
    assert not (tmp_path / "run").exists()  # refused before its directory was made


@needs_shakespeare
def test_gpt_trained_on_shakespeare_continues_on_a_users_text_file(user_files, tmp_path):
    # init_from: the weights that fit (blocks, positions), a fresh optimizer, schedule and step count; the
    # embedding and output layer, sized for Shakespeare's 65 characters, are reported and left as initialised.
    user, searchpath, env = user_files
    size = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32"]
    source = tmp_path / "shakespeare"
    result = run_train(
        "model=gpt",
        "data=shakespeare",
        "data.block_size=32",
        *size,
        "trainer.max_steps=10",
        *FAST,
        f"hydra.run.dir={source}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "continued"
    result = run_train(
        "model=gpt",
        "data=textfile",
        *size,
        f"init_from={source}",
        "trainer.max_steps=10",
        *FAST,
        *searchpath,
        f"hydra.run.dir={run}",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in (result.stdout + result.stderr).splitlines() if "init_from" in line)
    assert line.endswith("loaded 8 of 10 tensors; left as initialised (2): lm_head.weight, wte.weight")
    assert f"[WARNING] - {line}" in (run / "train.log").read_text()  # (a partial start: not an INFO line to miss)
    assert read_summary(run)["global_step"] == 10  # a new run: its own step count
    strict = run_train(
        "model=gpt",
        "data=textfile",
        *size,
        f"init_from={source}",
        "init_strict=true",
        *FAST,
        *searchpath,
        f"hydra.run.dir={tmp_path / 'strict'}",
        env=env,
    )
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    assert strict.stderr.strip().splitlines()[-1].startswith("error: init_strict: ")


def test_own_task_trains_a_model_and_checks_its_settings(user_files, tmp_path):
    user, searchpath, env = user_files
    run = tmp_path / "run"
    size = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32"]
    result = run_train(
        "model=gpt",
        "data=textfile",
        "task=focal",
        *size,
        "trainer.max_steps=30",
        *FAST,
        *searchpath,
        f"hydra.run.dir={run}",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run)
    assert summary["status"] == "completed" and summary["global_step"] == 30
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    first_loss = next(r["train/loss"] for r in records if "train/loss" in r)
    assert summary["train/loss"] < 0.75 * first_loss  # the focal loss falls: it learns
    assert "gamma: 2.0" in (run / ".hydra" / "config.yaml").read_text()

    refused = run_train(
        "data=textfile", "task=focal", "task.gamma=-1", *searchpath, f"hydra.run.dir={tmp_path}", env=env
    )
    assert (
        refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == "error: task.gamma: must be >= 0, got -1"
    )
    refused = run_train("model=bert", "data=textfile", "task=focal", *searchpath, f"hydra.run.dir={tmp_path}", env=env)
    assert "error: task: task=focal trains a decoder-only model, model=bert is an encoder-only model" in refused.stderr


# The datasets of docs/extending.md ("Your own dataset"), one of each form, copied from the page as it is written
# (helpers/docs.py).
@pytest.fixture(scope="module")
def documented(tmp_path_factory):
    """The page's files in a user's folder, and a poem for the text dataset."""
    user = tmp_path_factory.mktemp("documented")
    for path, text in documented_files().items():
        (user / path).parent.mkdir(parents=True, exist_ok=True)
        (user / path).write_text(text)
    (user / "poem.txt").write_text(TEXT)
    return user


def in_folder(user, *arguments, cwd, env=None):
    """`python train.py ...` or `python -m transformer_lab ...` in the folder `cwd`, without this process's
    PYTHONPATH."""
    env = {"PYTHONPATH": None, **(env or {})}
    if arguments[0] == "-m":
        assert arguments[1] == "transformer_lab"
        return run_command(*arguments[2:], cwd=cwd, env=env)
    assert arguments[0] == ROOT / "train.py"
    return run_train(*arguments[1:], cwd=cwd, env=env)


TINY_MODEL = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32"]


@pytest.mark.parametrize(
    "form, overrides, chance, command",
    [
        ("reverse", ["model=encdec", *TINY_MODEL, "trainer.max_steps=60"], math.log(15), ["translate", "text=a b c"]),
        ("maxof", ["trainer.max_steps=60"], math.log(12), ["classify"]),  # gpt: no command (evaluate serves it)
        (
            "charfile",
            ["model=t5", *TINY_MODEL, "model.d_ff=64", "task.input_length=24", "trainer.max_steps=30"],
            math.log(len(set(TEXT)) + 2 + 100),  # t5: <pad>, <eos> and 100 sentinels
            ["fill", "text=the quick <X0> fox"],  # the dataset's own encode(), around the sentinel
        ),
        ("shouting", ["model=bert", *TINY_MODEL, "trainer.max_steps=40"], math.log(2), ["classify", "text=BAD CHEF!"]),
    ],
)
def test_each_documented_form_trains_and_its_command_runs_from_the_run_directory_alone(
    documented, tmp_path, form, overrides, chance, command
):
    run = tmp_path / "run"
    trained = in_folder(
        documented,
        ROOT / "train.py",
        f"data={form}",
        *overrides,
        *FAST,
        "trainer.val_check_interval=20",
        f"hydra.searchpath=[file://{documented / 'myconf'}]",
        f"hydra.run.dir={run}",
        cwd=documented,
        env={"PYTHONPATH": "mydata"},
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = read_summary(run)
    assert summary["status"] == "completed" and summary["val/loss_best"] < chance - 0.1  # from chance: it learns
    if form == "maxof":  # the data's suggested sizes, for a model left at its defaults
        assert "n_layer: 1" in (run / ".hydra" / "config.yaml").read_text() or summary["n_params"] < 20_000
    # Elsewhere, with neither PYTHONPATH nor the search path: the run directory is enough.
    evaluated = in_folder(
        documented,
        "-m",
        "transformer_lab",
        "evaluate",
        run,
        "trainer.limit_val_batches=4",
        "out=eval.json",
        cwd=tmp_path,
    )  # (the batches its training validated on: its best.ckpt's val/loss again)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads((tmp_path / "eval.json").read_text())["metrics"]["val/loss"] == pytest.approx(
        summary["val/loss_best"], rel=1e-4
    )
    served = in_folder(documented, "-m", "transformer_lab", command[0], run, *command[1:], cwd=tmp_path, env={})
    if form == "maxof":  # a language model's answer token: classify is a classifier's command, refused by name
        assert served.returncode == 2 and "which `classify` cannot use" in served.stderr
        return
    assert served.returncode == 0, served.stderr[-3000:]
    (line,) = served.stdout.splitlines()
    if form == "reverse":
        assert set(line.split()) <= set("abcdefghij")  # the dataset's decode(): letters between spaces
    elif form == "charfile":
        assert line.startswith("the quick ") and line.endswith(" fox") and "<X0>" not in line  # the gap, filled
    else:
        text, label, probability = line.split("\t")[:3]
        assert text == "BAD CHEF!" and label in ("calm", "shouting") and 0 < float(probability) <= 1


def test_a_documented_text_run_resumes_evaluates_samples_exports_and_compares_from_its_directory(documented, tmp_path):
    run = tmp_path / "poem"
    trained = in_folder(
        documented,
        ROOT / "train.py",
        "data=charfile",
        *TINY_MODEL,
        "trainer.max_steps=30",
        *FAST,
        f"hydra.searchpath=[file://{documented / 'myconf'}]",
        f"hydra.run.dir={run}",
        cwd=documented,
        env={"PYTHONPATH": "mydata"},
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    # Elsewhere (a sibling folder), nothing repeated: resume, evaluate, sample, export, compare.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = in_folder(
        documented, "-m", "transformer_lab", "train", "ckpt_path=last", f"hydra.run.dir={run}", "trainer.max_steps=40",
        cwd=elsewhere,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_summary(run)["global_step"] == 40
    # A file the dataset refuses (a character its vocabulary lacks), and one that is not there: one line each.
    (elsewhere / "greek.txt").write_text("the Ω")
    refused = in_folder(documented, "-m", "transformer_lab", "evaluate", run, "data.path=greek.txt", cwd=elsewhere)
    assert refused.returncode == 2 and refused.stderr == (
        "error: data=charfile: CharFile.setup(): has characters not in the vocabulary: ['Ω']\n"
    )
    lost = in_folder(documented, "-m", "transformer_lab", "evaluate", run, "data.path=poems.txt", cwd=elsewhere)
    assert lost.returncode == 2 and lost.stderr == (
        f"error: data=charfile: cannot read poems.txt: No such file or directory; a relative path is read from {elsewhere}\n"
    )
    for arguments in (
        ["export", run, tmp_path / "exported"],
        ["compare", run, "plot=val/loss", f"out={tmp_path / 'curves.png'}"],
    ):
        done = in_folder(documented, "-m", "transformer_lab", *arguments, cwd=elsewhere)
        assert done.returncode == 0, (arguments[0], done.stderr[-3000:])
    sample = in_folder(
        documented, "-m", "transformer_lab", "sample", run, "prompt=the ", "max_new_tokens=12", cwd=elsewhere
    )
    assert sample.stdout.startswith("the ") and len(sample.stdout.rstrip("\n")) == 4 + 12
    refused = in_folder(documented, "-m", "transformer_lab", "sample", run, "prompt=Ω", cwd=elsewhere)
    assert refused.returncode == 2 and refused.stderr == "error: prompt: has characters not in the vocabulary: ['Ω']\n"
    assert (tmp_path / "exported" / "config.json").is_file()
    wrong = in_folder(
        documented, "-m", "transformer_lab", "train", "ckpt_path=last", f"hydra.run.dir={run}",
        f"hydra.searchpath=[file://{tmp_path / 'nowhere'}]", cwd=elsewhere,
    )  # fmt: skip
    assert wrong.returncode == 2 and wrong.stderr == (
        f"error: hydra.searchpath: {tmp_path / 'nowhere'} is not a folder (of config groups: model/, data/, ...)\n"
    )

    # The code moved away: one line naming it; the configs moved: one line naming them.
    (documented / "mydata").rename(documented / "mydata_moved")
    try:
        gone = in_folder(documented, "-m", "transformer_lab", "sample", run, cwd=elsewhere)
        assert gone.returncode == 2 and gone.stderr.startswith(f"error: {run / 'checkpoints'}")
        assert f"its run imported `charfile` from {documented / 'mydata'}, which is missing" in gone.stderr
    finally:
        (documented / "mydata_moved").rename(documented / "mydata")
    (documented / "myconf").rename(documented / "myconf_moved")
    try:
        before = sorted(p.name for p in (run / ".hydra").iterdir())
        gone = in_folder(documented, ROOT / "train.py", "ckpt_path=last", f"hydra.run.dir={run}", cwd=elsewhere)
        assert gone.returncode == 2 and gone.stderr.strip().splitlines()[-1].startswith("error: ckpt_path: ")
        assert f"found its config groups in {documented / 'myconf'} (hydra.searchpath), which is missing" in gone.stderr
        assert sorted(p.name for p in (run / ".hydra").iterdir()) == before  # a refused resume writes nothing
    finally:
        (documented / "myconf_moved").rename(documented / "myconf")


@pytest.mark.parametrize(
    "outputs, message",
    [
        ('("head",)', "error: optim.name: muon steps the weights of nn.Linear layers that give no logits, and "),
        ('("lm_head",)', "error: model: Declared.output_layers names 'lm_head', which is none of its layers"),
    ],
)
def test_own_model_declares_its_output_layers_for_muon(user_files, tmp_path, outputs, message):
    # TinyGRU's only nn.Linear is its head: declared so, Muon has nothing to step; a declared name it lacks is
    # refused (its head would go to Muon unnoticed). Either before training: no run directory is left.
    user, searchpath, env = user_files
    (tmp_path / "declared.py").write_text(
        f"from mine import TinyGRU\n\nclass Declared(TinyGRU):\n    output_layers = {outputs}\n"
    )
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "declared.yaml").write_text(
        textwrap.dedent(MODEL_YAML).replace("mine.TinyGRU", "declared.Declared").replace("name: mine", "name: declared")
    )
    run = tmp_path / "run"
    result = run_train(
        "model=declared", "data=shakespeare", "optim.name=muon", "trainer.max_steps=5", *FAST,
        f"hydra.searchpath=[file://{user / 'conf'},file://{tmp_path / 'conf'}]", f"hydra.run.dir={run}",
        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])},
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(message)
    assert not run.exists()


def test_own_yaml_edited_after_training_does_not_change_or_break_a_resume(user_files, tmp_path):
    """A key added to the user's data YAML since the run (one its class does not take), and one removed (its class
    default would differ): the resume continues with the section as trained, and says so."""
    import shutil

    user, _, env = user_files
    conf = tmp_path / "conf"
    shutil.copytree(user / "conf", conf)
    searchpath = [f"hydra.searchpath=[file://{conf}]"]
    run = tmp_path / "run"
    short = ["model=gpt", "model.n_layer=1", "model.n_head=2", "model.n_embd=32", "data=textfile", *FAST]
    first = run_train(*short, "trainer.max_steps=20", *searchpath, f"hydra.run.dir={run}", env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    data_yaml = conf / "data" / "textfile.yaml"
    data_yaml.write_text(data_yaml.read_text().replace("block_size: 32\n", "") + "foo: 1\n")
    resumed = run_train("ckpt_path=last", "trainer.max_steps=40", *searchpath, f"hydra.run.dir={run}", env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert read_summary(run)["global_step"] == 40
    log = (run / "train.log").read_text()
    assert "no data.foo (the files now say 1)" in log and "data.block_size=32 (the files now leave it out)" in log
