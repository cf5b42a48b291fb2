"""The Python API (docs/python.md): `transformer_lab.load(RUN)` opens a trained run — its model, vocabulary,
config, metrics and its task's verbs, the same code the commands run — and `transformer_lab.runs(...)` gives
compare's table as a DataFrame."""

import json
import statistics

import pytest
import torch

import transformer_lab
from helpers.runs import needs_shakespeare
from transformer_lab.errors import ConfigError, UserError


@needs_shakespeare
def test_a_run_opens_with_its_model_vocabulary_config_metrics_and_summary(trained):
    from transformer_lab.run.build import load_model

    run_dir = trained("gpt_text")
    run = transformer_lab.load(run_dir)
    assert run.path == run_dir and run.checkpoint == run_dir / "checkpoints" / "best.ckpt"
    assert not run.model.training and run.device == torch.device("cpu")
    model, meta = load_model(run.checkpoint)  # the one loader's weights
    for (name, ours), theirs in zip(run.model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(ours, theirs), name
    assert run.config.model.name == "gpt" and run.config.data.block_size == 32 and run.meta == meta
    text = "ROMEO: But soft"
    assert run.decode(run.encode(text)) == text and len(run.encode(text)) == len(text)  # characters
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(run.metrics) == len(records) and run.metrics["train/loss"].dropna().tolist() == [
        r["train/loss"] for r in records if "train/loss" in r
    ]
    assert run.summary == json.loads((run_dir / "summary.json").read_text()) and run.summary["status"] == "completed"


@needs_shakespeare
def test_generate_is_the_sample_commands_code(trained, capsys):
    from transformer_lab.commands.sample import main

    run_dir = trained("gpt_text")
    texts = transformer_lab.load(run_dir).generate("ROMEO:", max_new_tokens=12, num_samples=2, seed=3)
    main([str(run_dir), "prompt=ROMEO:", "max_new_tokens=12", "num_samples=2", "seed=3"])
    assert capsys.readouterr().out == "\n".join([texts[0], "-" * 40, texts[1]]) + "\n"
    assert all(t.startswith("ROMEO:") and len(t) == 18 for t in texts) and texts[0] != texts[1]


def test_a_verb_takes_one_text_a_list_or_a_stream(trained):
    run = transformer_lab.load(trained("bert_equations"))
    one, listed = run.classify("3 + 5 ="), run.classify(["3 + 5 =", "1 + 2 ="])
    streamed = run.classify(iter(["3 + 5 =", "1 + 2 ="]))
    assert not isinstance(streamed, list) and list(streamed) == listed and listed[0] == one
    assert one[0][0] in {str(c) for c in range(11)} and 0 < one[0][1] <= 1


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda run: run.classify("3 + 5 =", top=0), ConfigError, "top: must be an integer >= 1, got 0"),
        (lambda run: run.classify("3 + 5 =", beam_size=2), UserError, "unknown option(s) ['beam_size']; options: top, batch_size"),
        (lambda run: run.classify("3 + 5 =", top="2"), ConfigError, "top: must be an integer >= 1, got '2'"),
        # what Python's API takes and no command line gives: an infinity, nan, an integer past 64 bits
        (lambda run: run.classify("3 + 5 =", batch_size=float("inf")), ConfigError, "batch_size: must be an integer >= 1, got inf"),
    ],
)  # fmt: skip
def test_an_options_mistake_is_the_commands_one_line(trained, call, error, message):
    run = transformer_lab.load(trained("bert_equations"))
    with pytest.raises(error) as raised:
        call(run)
    assert str(raised.value) == message


def test_what_python_gives_and_no_command_line_does_is_one_line_too(trained):
    run = transformer_lab.load(trained("gpt_text"))
    for options, message in [
        ({"prompt": 3}, "prompt: must be text, got 3"),  # (it sampled the text "3")
        ({"temperature": float("nan")}, "temperature: must be a number >= 0, got nan"),
        ({"seed": 2**70}, f"seed: must be an integer >= 0, got {2**70}"),  # (torch's overflow traceback)
    ]:
        with pytest.raises(ConfigError) as raised:
            run.generate(**{"prompt": "RO", **options})
        assert str(raised.value) == message


def test_a_list_item_or_an_input_that_is_not_text_is_one_line(trained):
    """A list's None or number reaches no tokenizer (it was an AttributeError, or the default prompt sampled)."""
    run = transformer_lab.load(trained("bert_equations"))
    with pytest.raises(UserError, match=r"^texts: each one a text, got 3 \(line 2\)$"):
        run.classify(["3 + 5 =", 3])
    with pytest.raises(UserError, match=r"^texts: each one a text, got None \(line 1\)$"):
        list(run.classify(iter([None])))
    for inputs in [(None,), (5,), ()]:
        with pytest.raises(UserError, match=r"^activations: a text or the model's input tensors, got "):
            run.activations(*inputs)
    gpt = transformer_lab.load(trained("gpt_text"))
    with pytest.raises(UserError, match=r"^prompt: each one a text, got None$"):
        gpt.generate(["RO", None], max_new_tokens=2)


def test_a_sample_without_a_prompt_starts_where_the_run_sampled_from(trained):
    """prompt=None (the default): the run's own data.sample_prompt, which its data can encode (the command's "\n"
    was not in data=repeats' letters)."""
    run = transformer_lab.load(trained("gpt_repeats"))
    text = run.generate(max_new_tokens=5, temperature=0)[0]
    assert (
        text.startswith(run.config.data.sample_prompt)
        and text == run.generate(run.config.data.sample_prompt, max_new_tokens=5, temperature=0)[0]
    )


def test_loading_what_is_not_a_run_or_on_a_missing_device_is_one_line(trained, tmp_path):
    with pytest.raises(UserError, match=rf"^no run directory or checkpoint file at {tmp_path / 'nothing'}$"):
        transformer_lab.load(tmp_path / "nothing")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError) as raised:
            transformer_lab.load(trained("bert_equations"), device="cuda")
        assert str(raised.value) == "device: cuda asks for a CUDA GPU but torch sees none; use device=cpu"


def test_runs_is_compares_table_as_a_dataframe(seeded, capsys, monkeypatch):
    from transformer_lab.commands.compare import main

    frame = transformer_lab.runs(seeded)
    monkeypatch.setenv("COLUMNS", "300")
    main([*map(str, seeded)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(frame.columns)  # the same columns, in compare's order
    assert [line.split()[0] for line in lines[2:]] == frame["run"].tolist()  # the same runs, sorted by val/loss
    assert frame["val/loss"].tolist() == [1.0, 1.4, 2.0, 2.5, 3.0]
    assert frame["optim.lr"].tolist() == [0.003, 0.003, 0.001, 0.001, 0.001]  # values, not their text
    assert frame["seed"].tolist() == [0, 1, 0, 1, 2]


def test_runs_group_by_gives_mean_sample_std_and_n(seeded):
    frame = transformer_lab.runs([str(p) for p in seeded], group_by="optim.lr", metrics=["val/loss"])
    assert list(frame.columns) == ["optim.lr", "val/loss mean", "val/loss std", "n"]
    assert frame["optim.lr"].tolist() == [0.003, 0.001] and frame["n"].tolist() == [2, 3]
    assert frame["val/loss mean"].tolist() == pytest.approx([1.2, 2.5])
    assert frame["val/loss std"].tolist() == pytest.approx(
        [statistics.stdev([1.0, 1.4]), statistics.stdev([2.0, 2.5, 3.0])]
    )
    alone = transformer_lab.runs([str(seeded[0])], group_by="optim.lr", metrics=["val/loss"])
    assert alone["val/loss std"].tolist() == [0.0] and alone["n"].tolist() == [1]  # (compare's "± 0", not NaN)


def test_runs_mistakes_are_compares_one_line(seeded, tmp_path):
    with pytest.raises(UserError, match=r"^group_by: no run has the setting 'optim.lrr' \(.hydra/config.yaml\)$"):
        transformer_lab.runs(seeded, group_by="optim.lrr")
    with pytest.raises(
        UserError, match=r"^metrics: no run's summary.json has val/acc \(they have: global_step, status, val/loss\)$"
    ):
        transformer_lab.runs(seeded, metrics=["val/acc"])
    with pytest.raises(UserError, match=rf"^no run directories \(with a summary.json\) under {tmp_path / 'empty'}$"):
        (tmp_path / "empty").mkdir()
        transformer_lab.runs(tmp_path / "empty")
    with pytest.raises(UserError, match=rf"^{tmp_path / 'nothere'}: no such file or directory$"):
        transformer_lab.runs(tmp_path / "nothere")


def test_answer_is_the_answer_commands_code(trained, capsys):
    from transformer_lab.commands.answer import main

    run_dir = trained("gpt_equations")
    run = transformer_lab.load(run_dir)
    equations = ["3 + 5 =", "10 + 10 =", "7 + 0 ="]
    answers = run.answer(equations)
    main([str(run_dir), "text=3 + 5 ="])
    assert capsys.readouterr().out == answers[0] + "\n" and run.answer("3 + 5 =") == answers[0]
    assert len(answers) == 3 and all(isinstance(a, str) for a in answers)  # (4 steps: what it answers, untrained)
    with pytest.raises(UserError, match=r"which `answer` cannot use: python -m transformer_lab classify "):
        transformer_lab.load(trained("bert_equations")).answer("3 + 5 =")


def test_the_strangers_misuses_are_one_line_each(trained, seeded):
    """What a hurried researcher tried (issue #56's stranger): wrong types are one line naming the argument, not a
    TypeError from inside; a Python mistake is not told to use the command line."""
    from transformer_lab.api.runs import value

    calls = [
        (lambda: transformer_lab.load(None), "load: which run? give a run directory or a checkpoint file, got None"),
        (lambda: transformer_lab.load(3), "load: a run directory or a checkpoint file (a str or a Path), got int"),
        (lambda: transformer_lab.runs(None), "runs: a run directory or sweep, or a list of them, got NoneType"),
        (lambda: transformer_lab.runs(seeded, group_by=3), "group_by: a key or a list of keys, got 3"),
        (lambda: transformer_lab.runs(seeded, descending="yes"), "descending: must be true or false, got 'yes'"),
    ]
    equations = transformer_lab.load(trained("gpt_equations"))
    calls += [
        (lambda: equations.answer("3 + 5 =", beam_size=3), "unknown option(s) ['beam_size']; options: max_len, batch_size"),
        (lambda: equations.answer(5), "answer: a text, a list of texts or an iterable of lines, got int"),
        (lambda: equations.answer(b"3 + 5 ="), "answer: a text, a list of texts or an iterable of lines, got bytes"),
        (lambda: equations.answer(["3 + 5 ="], warn="x"), "warn: a function taking the warning's text, got 'x'"),
    ]  # fmt: skip
    for call, message in calls:
        with pytest.raises(UserError) as refused:
            call()
        assert str(refused.value) == message
    assert transformer_lab.runs(seeded, metrics="val/loss").columns[-1] == "val/loss"  # (one metric, as text)
    assert value("None") is None and value("0.001") == 0.001 and value("gelu") == "gelu"
    assert list(equations.activations("3 + 5 =", modules="lm_head")) == ["lm_head"]


def test_an_encoder_decoders_activations_of_a_text_run_it_on_its_greedy_target(trained):
    run = transformer_lab.load(trained("encdec_equations"))
    acts = run.activations("3 + 5 =")
    weights, tokens = run.attention("3 + 5 =")  # (the same inputs: the text, and its greedy output as the target)
    assert acts["decoder.0.cross_attn"].shape[1] == len(tokens["target"])
    assert acts["encoder.0.self_attn"].shape[1] == len(tokens["source"])


@needs_shakespeare
def test_generate_takes_a_list_of_prompts_and_metrics_follow_the_file(trained, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(trained("gpt_text"), run_dir)
    run = transformer_lab.load(run_dir)
    both = run.generate(["ROMEO:", "JULIET:"], max_new_tokens=5, seed=1)
    assert both == [run.generate("ROMEO:", max_new_tokens=5, seed=1), run.generate("JULIET:", max_new_tokens=5, seed=1)]
    before = len(run.metrics)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 999, "val/loss": 1.0}\n')
    assert len(run.metrics) == before + 1 and run.metrics["step"].iloc[-1] == 999  # (read again: the file changed)


def process_state():
    import gc
    import logging
    import os
    import signal
    import sys

    from hydra.core.global_hydra import GlobalHydra

    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    root = logging.getLogger()
    return (
        list(sys.argv), sys.stderr, handlers, root.handlers[:], root.level, os.environ.get("HYDRA_FULL_ERROR"),
        gc.get_freeze_count(), GlobalHydra.instance().is_initialized(),
    )  # fmt: skip


def test_train_is_train_py_in_this_process_and_gives_the_run(trained, tmp_path, capsys):
    """transformer_lab.train(OVERRIDES) composes OVERRIDES as `python train.py` does and trains the same run: the
    weights of the fixture's run of the same settings; the process is left as it was (no frozen garbage)."""
    from helpers.runs import ROOT, TINY
    from helpers.trained_runs import RUNS

    before = process_state()
    settings = [*TINY, "logger=none", "trainer.val_check_interval=20", "task.sample.enabled=false"]
    run = transformer_lab.train(
        *settings,
        "task.decode.beam_size=1",
        *RUNS["gpt_equations"],
        f"paths.root_dir={ROOT}",
        f"hydra.run.dir={tmp_path}",
    )
    assert process_state() == before
    assert run.path == tmp_path and run.summary["status"] == "completed" and run.summary["global_step"] == 4
    theirs = transformer_lab.load(trained("gpt_equations")).model.state_dict()
    for name, tensor in run.model.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name
    assert (tmp_path / ".hydra" / "overrides.yaml").is_file() and "error" not in capsys.readouterr().err


def test_a_train_mistake_is_train_pys_one_line_raised(tmp_path, capsys):
    from helpers.runs import run_train

    before = process_state()
    for words in (["model.n_layer=-1"], ["data=nope"], ["data=modular", "trainer.max_stepz=3"]):
        line = run_train(*words, f"hydra.run.dir={tmp_path / 'cli'}").stderr.strip().splitlines()[-1]
        with pytest.raises(UserError) as refused:
            transformer_lab.train(*words, f"hydra.run.dir={tmp_path / 'api'}")
        assert f"error: {refused.value}" == line
        assert "error:" not in capsys.readouterr().err  # (raised, not printed too)
    (tmp_path / "file").write_text("")  # (a run directory inside a file: the command's line, the environment kept)
    words = ["data=modular", f"hydra.run.dir={tmp_path / 'file' / 'run'}"]
    line = run_train(*words).stderr.strip().splitlines()[-1]
    with pytest.raises(UserError) as refused:
        transformer_lab.train(*words)
    assert f"error: {refused.value}" == line
    assert process_state() == before and not (tmp_path / "api").exists()


@pytest.mark.parametrize(
    ("words", "keywords", "message"),
    [
        (["-m", "seed=1,2"], {}, "train: -m is the command line's (python train.py -m ...); train() runs one run"),
        (["--cfg", "job"], {}, "train: --cfg is the command line's (python train.py --cfg ...); train() runs one run"),
        (["data=modular", 3], {}, "train: overrides are the command line's words (str), got int"),
        ([["data=modular"]], {}, "train: overrides are the command line's words (str), got list"),
        (
            ["data=modular model.n_layer=2"],
            {},
            """train: one override an argument: train("data=modular", "model.n_layer=2"); got 'data=modular model.n_layer=2'""",
        ),
        (
            ["python", "train.py"],
            {},
            "train: 'python' is no key=value override (train() takes the words after python train.py)",
        ),
        ([""], {}, "train: '' is no key=value override (train() takes the words after python train.py)"),
        (
            ["data=modular"],
            {"hydra_run_dir": "x"},
            """train: overrides are words, one an argument: train("data=modular", "model.n_layer=2"); got the keyword hydra_run_dir=""",
        ),
    ],
)
def test_train_takes_the_command_lines_words_one_an_argument(words, keywords, message):
    with pytest.raises(UserError) as refused:
        transformer_lab.train(*words, **keywords)
    assert str(refused.value) == message and transformer_lab.UserError is UserError


def test_train_from_another_thread_is_refused_and_a_callers_hydra_session_stays(tmp_path):
    import threading

    from hydra import compose, initialize_config_dir

    from helpers.runs import ROOT, TINY

    raised = []
    thread = threading.Thread(
        target=lambda: raised.append(pytest.raises(UserError, transformer_lab.train, "data=modular"))
    )
    thread.start()
    thread.join()
    assert (
        str(raised[0].value)
        == "train: call it from the main thread (Ctrl-C and SIGTERM stop a run through signal handlers)"
    )
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        transformer_lab.train("data=modular", *TINY, "trainer.max_steps=2", "logger=none", f"hydra.run.dir={tmp_path}")
        assert compose("train", overrides=["data=modular"]).data.p == 97  # (the caller's session, still open)
