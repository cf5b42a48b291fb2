"""Tiny runs of each model x data pair, trained once a test session and shared by its workers (the unit tier's
`trained` fixture, tests/unit/conftest.py): the Python API's, the commands' and evaluate's tests read them."""

import os

import pytest

from helpers.runs import SHAKESPEARE, TINY, compose_cfg, train_in_process
from helpers.translation import write_pairs

# Batches of 16 where the data has more than that (batches of 64 cost 4x as much, mostly T5's span corruption
# of each window, and what t5_text's model fills in is the same after 40 steps of either).
SMALL = ["data.batch_size=16"]
# The runs that only evaluate reads (and option checks that refuse before a model is used): what evaluate must
# give back is the run's best validation, whatever the model learned; two validations, so that best.ckpt is
# the better of two.
EVALUATED = ["trainer.max_steps=4", "trainer.val_check_interval=2"]
# A run's overrides come last: they override the fixture's defaults (trainer.val_check_interval=20).
RUNS = {
    "gpt_text": ["model=gpt", "data=shakespeare", "data.block_size=32", "trainer.max_steps=40", "optim.lr=1e-2"],
    "t5_text": [
        "model=t5",
        "data=shakespeare",
        "task.input_length=32",
        "trainer.max_steps=40",
        "optim.lr=1e-2",
        *SMALL,
    ],
    "bert_equations": ["model=bert", "data=modular", "data.p=11", "trainer.max_steps=60", "optim.lr=3e-3"],
    "gpt_pairs": [
        "model=gpt",
        "data=translation",
        "data.vocab_size=100",
        "data.max_length=12",
        "trainer.max_steps=40",
        "optim.lr=3e-3",
    ],
    # the other pairs, for evaluate
    "gpt_equations": ["model=gpt", "data=modular", "data.p=11", *EVALUATED],
    "gpt_repeats": ["model=gpt", "data=repeats", "data.characters=5000", *EVALUATED],  # (sample_prompt not "\n")
    "encdec_equations": ["model=encdec", "data=modular", "data.p=11", *EVALUATED],
    "t5_pairs": ["model=t5", "data=translation", "data.vocab_size=100", "task.input_length=16", *EVALUATED, *SMALL],
    # the combinations of a second task (task=NAME)
    "t5_translation": [
        "model=t5",
        "task=seq2seq",
        "data=translation",
        "data.vocab_size=100",
        *EVALUATED,
        *SMALL,
        "task.decode.max_extra_len=4",  # (an untrained model's greedy outputs run to the limit at each validation)
    ],
    "t5_equations": ["model=t5", "task=seq2seq", "data=modular", "data.p=11", *EVALUATED],
    "bert_text": ["model=bert", "task=mlm", "data=shakespeare", "task.length=32", *EVALUATED, *SMALL],
    "encdec_text": ["model=encdec", "task=spans", "data=shakespeare", "task.input_length=32", *EVALUATED, *SMALL],
    "bert_pairs": [
        "model=bert",
        "task=mlm",
        "data=translation",
        "data.vocab_size=100",
        "task.length=16",
        *EVALUATED,
        *SMALL,
    ],
}


def has_decode(overrides: list[str]) -> bool:
    """Whether a run's task decodes outputs (task=lm and task=seq2seq: task.decode)."""
    return (
        "model=gpt" in overrides
        or "task=seq2seq" in overrides
        or "model=encdec" in overrides
        and "task=spans" not in overrides
    )


def trained_runs(tmp_path_factory):
    """run(name) -> the run directory of a tiny model trained in a worker of this session, once for all of
    them: under pytest-xdist the runs are kept in the folder the workers' temporary folders share, and a worker
    that needs a run another is training waits for it (a lock per run) instead of training it again. The tests
    only read a run directory (evaluate writes its results elsewhere: out=)."""
    import fcntl

    tmp = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # this session's, shared by its workers (one folder each in it)
        tmp = tmp.parent
    tmp = tmp / "inference_runs"
    tmp.mkdir(exist_ok=True)

    def train(name):
        pairs = tmp / "pairs.tsv"
        if "data=translation" in RUNS[name] and not pairs.exists():  # (the same file from every worker)
            os.replace(write_pairs(tmp / f"pairs.{os.getpid()}.tsv", n=300), pairs)
        toy_pairs = [f"data.path={pairs}", f"paths.data_dir={tmp / 'data'}"] if "data=translation" in RUNS[name] else []
        cfg = compose_cfg(
            [
                *TINY,
                *toy_pairs,
                "logger=none",
                "trainer.val_check_interval=20",
                *(["task.sample.enabled=false"] if "model=gpt" in RUNS[name] else []),  # (task=lm's)
                *(["task.decode.beam_size=1"] if has_decode(RUNS[name]) else []),
                *RUNS[name],
            ],
            output_dir=str(tmp / name),
            return_hydra_config=True,
        )
        train_in_process(cfg)

    def trained_run(name):
        if "data=shakespeare" in RUNS[name] and not SHAKESPEARE.exists():
            pytest.skip(f"{SHAKESPEARE} missing: run `make data`")
        done = tmp / f"{name}.done"
        if not done.exists():
            with open(tmp / f"{name}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if not done.exists():  # (another worker may have trained it meanwhile)
                        train(name)
                        done.touch()
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        return tmp / name

    return trained_run
