"""Asking a model trained on equations for its answers (`python -m transformer_lab answer RUN text="3+5="`, api/answer.py),
its refusals, exact match of a translation beside BLEU in summary.json, and evaluate's predictions=FILE."""

import json

import pytest
import torch

from helpers.modular import solve
from helpers.runs import SHAKESPEARE, TINY, compose_cfg, run_command, train_in_process
from helpers.translation import write_pairs
from transformer_lab.errors import UserError
from transformer_lab.run.build import datamodule_from_checkpoint, load_model

# Tiny runs of each kind the tests read (logger=none; a validation at the last step).
RUNS = {
    "gpt_equations": ["model=gpt", "data=modular", "data.p=11", "trainer.max_steps=60", "optim.lr=1e-2"],
    "encdec_equations": ["model=encdec", "data=modular", "data.p=11", "trainer.max_steps=4"],
    "gpt_pairs": ["model=gpt", "data=translation", "data.vocab_size=100", "data.max_length=12", "trainer.max_steps=4"],
    "gpt_text": ["model=gpt", "data=shakespeare", "data.block_size=16", "trainer.max_steps=2"],
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """run(name) -> the run directory of a tiny model trained once for this module (in this process)."""

    tmp = tmp_path_factory.mktemp("answer_runs")
    done = {}

    def trained_run(name):
        if name in done:
            return done[name]
        if "data=shakespeare" in RUNS[name] and not SHAKESPEARE.exists():
            pytest.skip(f"{SHAKESPEARE} missing: run `make data`")
        pairs = [f"data.path={write_pairs(tmp / 'pairs.tsv', n=120)}", f"paths.data_dir={tmp / 'data'}"]
        cfg = compose_cfg(
            [
                *TINY,
                *(pairs if "data=translation" in RUNS[name] else []),
                "logger=none",
                "trainer.val_check_interval=1000",
                *(["task.sample.enabled=false"] if "model=gpt" in RUNS[name] else []),  # (task=lm's)
                "task.decode.beam_size=1",
                "task.decode.val_beam_size=1",
                "task.decode.max_extra_len=4",
                *RUNS[name],
            ],
            output_dir=str(tmp / name),
            return_hydra_config=True,
        )
        train_in_process(cfg)
        done[name] = tmp / name
        return done[name]

    return trained_run


def greedy_answers(run_dir, equations: list[str]) -> list[str]:
    """Each equation's answer worked out here from the model's logits at its last position: an argmax, no
    decoding loop (a decoder-only run on single-token answers)."""
    model, meta = load_model(run_dir / "checkpoints" / "best.ckpt")
    datamodule = datamodule_from_checkpoint(meta)
    with torch.no_grad():
        logits = model(torch.tensor([datamodule.encode(e) for e in equations]))
    return [datamodule.answer_text(int(i)) for i in logits[:, -1].argmax(-1)]


def test_answer_gives_a_decoder_only_models_answer_for_each_equation(trained):
    run_dir = trained("gpt_equations")
    equations = [f"{a} + {b} =" for a in range(11) for b in (3, 7)]
    expected = greedy_answers(run_dir, equations)
    result = run_command("answer", run_dir, input="\n".join(equations) + "\n")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.splitlines() == expected
    assert sum(int(a) == solve(e, 11) for a, e in zip(expected, equations)) > 2  # (trained: above chance, 2 of 22)
    one = run_command("answer", run_dir, "text=3+5=")  # spaces are the data's to read: `3+5=` is `3 + 5 =`
    assert one.returncode == 0 and one.stdout == f"{greedy_answers(run_dir, ['3 + 5 ='])[0]}\n"


def test_answer_decodes_an_encoder_decoders_answer_up_to_its_end(trained):
    from transformer_lab import load
    from transformer_lab.api.answer import answers
    from transformer_lab.data.tokens import BOS, EOS
    from transformer_lab.tasks.decoding import greedy

    run = load(trained("encdec_equations"))
    equations = ["1 + 2 =", "10 + 10 =", "0 + 0"]
    src = torch.tensor([run.datamodule.encode(e) for e in equations])
    expected = [run.datamodule.answer_text(ids) for ids in greedy(run.model, src, 1, BOS, EOS)]
    assert list(answers(run.model, run.datamodule, equations)) == expected
    result = run_command("answer", run.path, "text=10 + 10 =")
    assert result.returncode == 0 and result.stdout == f"{expected[1]}\n"


def test_a_line_the_model_cannot_take_is_an_empty_answer_and_a_warning(trained):
    run_dir = trained("gpt_equations")
    result = run_command("answer", run_dir, input="3 + 5 =\n\n3 + 12 =\n3 * 5 =\n")
    lines = result.stdout.split("\n")
    assert result.returncode == 0 and len(lines) == 5 and lines[0] and lines[1:] == ["", "", "", ""]
    assert result.stderr.splitlines() == [
        "warning: line 2 is empty; its answer is empty",
        "warning: line 3: 12: not a number in 0..10 (data.p=11); its answer is empty",
        "warning: line 4: expected an equation of the form `a + b =` (data.op=+, data.terms=2); its answer is empty",
    ]


@pytest.mark.parametrize(
    "run, arguments, message",
    [
        ("gpt_text", ["text=3 + 5 ="], "which `answer` cannot use: python -m transformer_lab sample "),
        ("gpt_pairs", ["text=3 + 5 ="], "which `answer` cannot use: python -m transformer_lab translate "),
        ("gpt_equations", ["text=3 + 12 ="], "text: 12: not a number in 0..10 (data.p=11)"),
        (
            "gpt_equations",
            ["text=3 * 5 ="],
            "text: expected an equation of the form `a + b =` (data.op=+, data.terms=2)",
        ),
        ("gpt_equations", ["text=  "], "text: is empty"),
        ("gpt_equations", [], "no input: give text=... or one input a line on standard input"),
        ("gpt_equations", ["text=3 + 5 =", "max_len=0"], "max_len: must be an integer >= 1 or null, got 0"),
        ("gpt_equations", ["text=3 + 5 =", "batch_size=0"], "batch_size: must be an integer >= 1, got 0"),
        (
            "gpt_equations",
            ["text=3 + 5 =", "max_len=2"],
            "max_len: 2 answer tokens do not fit the model's 4 positions after an equation of 4 tokens: at most 1",
        ),
        (
            "gpt_equations",
            ["text=3 + 5 =", "beams=2"],
            "unknown option 'beams'; answer takes: ckpt, text, max_len, batch_size, device",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_refusal_is_one_line_and_exit_2(trained, run, arguments, message):
    run_dir = trained(run)
    result = run_command("answer", run_dir, *arguments, input="")
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr.startswith("error: ") and message in result.stderr and result.stderr.count("\n") == 1, (
        result.stderr
    )


def test_answers_in_python_take_the_same_options(trained):
    from transformer_lab import load
    from transformer_lab.api.answer import answers

    run = load(trained("gpt_equations"))
    warnings = []
    assert list(answers(run.model, run.datamodule, ["3 + 5 =", "x"], warn=warnings.append)) == [
        greedy_answers(run.path, ["3 + 5 ="])[0],
        "",
    ]
    assert warnings == [
        "line 2: expected an equation of the form `a + b =` (data.op=+, data.terms=2); its answer is empty"
    ]
    with pytest.raises(UserError, match=r"^max_len: must be an integer >= 1 or null, got 'two'$"):
        next(answers(run.model, run.datamodule, ["3 + 5 ="], max_len="two"))


def test_evaluate_writes_each_examples_prediction(trained, tmp_path):
    from transformer_lab.commands.evaluate import evaluate

    run_dir = trained("gpt_equations")
    file = tmp_path / "predictions.jsonl"
    result = evaluate(str(run_dir), "val", [], str(tmp_path / "eval.json"), predictions=str(file))
    records = [json.loads(line) for line in file.read_text().splitlines()]
    assert result["predictions"] == {"file": str(file), "examples": len(records)}
    assert len(records) == 121 - round(121 * 0.5)  # the validation equations of p=11 (train_fraction 0.5), each once
    assert all(set(r) == {"input", "prediction", "reference", "exact"} for r in records)
    assert [r["reference"] for r in records] == [str(solve(r["input"], 11)) for r in records]
    assert [r["prediction"] for r in records] == greedy_answers(run_dir, [r["input"] for r in records])
    assert [r["exact"] for r in records] == [r["prediction"] == r["reference"] for r in records]
    assert sum(r["exact"] for r in records) / len(records) == pytest.approx(result["metrics"]["val/acc"])
    # a file that exists is kept unless overwrite=true, before anything is evaluated
    with pytest.raises(UserError, match=rf"^predictions={file}: the file exists; give another name, or overwrite=true"):
        evaluate(str(run_dir), "val", [], str(tmp_path / "other.json"), predictions=str(file))
    file.write_text("mine\n")
    evaluate(str(run_dir), "val", [], str(tmp_path / "eval.json"), predictions=str(file), overwrite=True)
    assert [json.loads(line) for line in file.read_text().splitlines()] == records
    with pytest.raises(UserError, match=rf"^predictions={tmp_path}: give a file name"):
        evaluate(str(run_dir), "val", [], str(tmp_path / "other.json"), predictions=str(tmp_path))


def test_evaluate_refuses_predictions_for_a_run_that_scores_no_example(trained, tmp_path):
    result = run_command("evaluate", trained("gpt_text"), f"predictions={tmp_path / 'p.jsonl'}")
    assert result.returncode == 2 and result.stderr == (
        f"error: predictions={tmp_path / 'p.jsonl'}: task=lm on data=shakespeare scores no example on its own "
        "(its metrics: the loss over all tokens); leave predictions= out\n"
    )
    assert not (tmp_path / "p.jsonl").exists()


def test_a_translations_exact_match_is_logged_beside_bleu_and_written_per_example(trained, tmp_path):
    run_dir = trained("gpt_pairs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {"val/exact_match", "test/exact_match", "val/bleu", "test/bleu"} <= set(summary)
    file = tmp_path / "p.jsonl"
    result = run_command("evaluate", run_dir, "split=test", f"predictions={file}", f"out={tmp_path / 'e.json'}")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in file.read_text().splitlines()]
    pairs = dict(line.split("\t") for line in (run_dir.parent / "pairs.tsv").read_text().splitlines())
    assert all(pairs[r["input"]] == r["reference"] for r in records)
    metrics = json.loads((tmp_path / "e.json").read_text())["metrics"]
    assert metrics["test/exact_match"] == pytest.approx(sum(r["exact"] for r in records) / len(records))
    assert f"{len(records)} predictions written to {file}" in result.stdout
