"""Using a trained model from its run directory alone: sample, translate (encoder-decoder and prefix LM),
fill (T5), classify (BERT), and evaluate on a user's file; each reads its input exactly as training did."""

import itertools
import math
import shutil

import pytest
import torch

import transformer_lab
from helpers.runs import SHAKESPEARE, needs_shakespeare
from transformer_lab.errors import DataUnavailableError, UserError
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.run.build import datamodule_from_checkpoint, load_model
from transformer_lab.tasks.decoding import PrefixLM, beam_search, continue_prompts, length_normalised


def set_up(run_dir):
    model, meta = load_model(run_dir / "checkpoints" / "best.ckpt")
    datamodule = datamodule_from_checkpoint(meta)
    datamodule.setup("fit")
    return model, datamodule


def test_beam_search_over_a_decoder_only_model_is_exact_search_when_the_beam_holds_everything():
    # Vocabulary 5, 3 new tokens at most, a beam of 5^3: every continuation stays in the beam, so the result
    # must be the best length-normalised one of all, found here by enumerating them on full forward passes
    # (no cache): this checks the prompt's cache, its reordering between beams, and the scores.
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=5, block_size=8, n_layer=2, n_head=2, n_embd=16)).eval()
    prompts, eos, max_new = torch.tensor([[0, 3, 4, 1], [1, 1, 0, 3]]), 2, 3
    found = beam_search(PrefixLM(model, 4), prompts, 5**3, max_new, bos=eos, eos=eos, length_penalty=0.6)

    def score(prompt, continuation, ended):
        sequence = torch.tensor([[*prompt, *continuation, *([eos] if ended else [])]])
        logp = model(sequence).log_softmax(-1)[0]
        steps = range(len(prompt) - 1, sequence.size(1) - 1)
        return sum(logp[t, sequence[0, t + 1]].item() for t in steps)

    for prompt, best in zip(prompts.tolist(), found):
        candidates = [(c, True) for n in range(max_new) for c in itertools.product([0, 1, 3, 4], repeat=n)]
        candidates += [(c, False) for c in itertools.product([0, 1, 3, 4], repeat=max_new)]
        ranked = max(candidates, key=lambda c: length_normalised(score(prompt, *c), len(c[0]) + c[1], 0.6))
        assert list(ranked[0]) == best
    # and a beam of one is greedy decoding, as generate() does it
    greedy = continue_prompts(model, prompts, max_new, eos, beam_size=1).outputs
    assert beam_search(PrefixLM(model, 4), prompts, 1, max_new, bos=eos, eos=eos) == greedy


@needs_shakespeare
def test_fill_reads_gaps_as_the_training_examples_show_them(trained):
    from transformer_lab.tasks.decoding import fill_spans_greedy

    run_dir = trained("t5_text")
    model, datamodule = set_up(run_dir)
    inputs = next(iter(datamodule.val_dataloader()))[0][:4]
    shown = [datamodule.decode(x) for x in inputs.tolist()]  # what the run's examples print, <X0> ... marks
    assert [datamodule.encode(text) for text in shown] == inputs.tolist()
    run = transformer_lab.load(run_dir)
    spans = run.fill(shown, spans=True, max_len=20)
    expected = fill_spans_greedy(model, inputs, 20, datamodule.pad_id, datamodule.eos_id)
    assert list(spans) == [
        datamodule.decode(ids[: ids.index(datamodule.eos_id)] if datamodule.eos_id in ids else ids) for ids in expected
    ]
    # the text with its gaps filled keeps what was around them
    filled = run.fill("To be, or not <X0> be: that is the <X1>")
    assert filled.startswith("To be, or not ") and " be: that is the " in filled and "<X" not in filled
    warnings = []
    lines = ["<X100> is out of range", "no gap", "a <X1> b <X0>", "a <X0> b <X0>", "a <X1>"]
    assert run.fill(lines, warn=warnings.append)[::2] == ["", "", ""]
    assert warnings == [
        "line 1: <X100>: this model has the sentinels <X0> to <X99>; its output line is empty",
        "line 2 has no gap (<X0>, <X1>, ...) to fill",
        *(
            f"line {n}: its gaps are {gaps}: number them <X0>, <X1>, ... from the left, each once, as training "
            "does; its output line is empty"
            for n, gaps in ((3, "<X1> <X0>"), (4, "<X0> <X0>"), (5, "<X1>"))
        ),
    ]


def test_classify_gives_the_models_answer_for_each_equation(trained):
    run_dir = trained("bert_equations")
    model, datamodule = set_up(run_dir)
    x = datamodule.x[datamodule.val]
    lines = [datamodule.decode(row) for row in x.tolist()]  # "3 + 5 =", as the run's examples print them
    assert [datamodule.encode(line) for line in lines] == x.tolist()
    run = transformer_lab.load(run_dir)
    results = run.classify(lines, top=2)
    with torch.no_grad():
        probabilities = model(x).softmax(-1)
    for ranked, p in zip(results, probabilities):
        (first, p1), (_, p2) = ranked
        assert first == str(p.argmax().item()) and p1 == pytest.approx(p.max().item(), abs=1e-6) and p1 >= p2
    warnings = []
    lines = ["3 * 5 =", "12 + 1", "  ", "3 + 5 =\t8\textra"]
    answers = run.classify(lines, warn=warnings.append)
    assert answers[:3] == [[], [], []] and len(answers[3]) == 1
    assert warnings == [
        "line 1: expected an equation of the form `a + b =` (data.op=+, data.terms=2)",
        "line 2: 12: not a number in 0..10 (data.p=11)",
        "line 3 is empty; its output line holds no class",
        "line 4 has 3 tab-separated fields: its first is classified",
    ]


def test_translate_with_a_decoder_only_model_prompts_as_training_did(trained):
    from transformer_lab.data.tokens import EOS

    run_dir = trained("gpt_pairs")
    model, datamodule = set_up(run_dir)
    sources = [s for s, _ in datamodule.data.text["val"][:6]]
    x, _, rows = next(iter(datamodule.val_dataloader()))
    prompt = x[0, : datamodule.prompt_lengths("val")[rows[0]]].tolist()  # `<bos> source <sep>` as validated
    assert datamodule.encode(datamodule.data.text["val"][rows[0]][0]) == prompt
    run = transformer_lab.load(run_dir)
    greedy = run.translate(sources, beam_size=1)
    expected = [
        datamodule.decode(continue_prompts(model, torch.tensor([datamodule.encode(s)]), 50, EOS).outputs[0])
        for s in sources
    ]
    assert greedy == expected and any(greedy)
    beam = run.translate(sources, beam_size=3)
    assert len(beam) == len(sources)


@pytest.mark.parametrize(
    "command, run, serves",
    [
        ("sample", "t5_text", "fill"),
        ("translate", "gpt_text", "sample"),
        ("fill", "bert_equations", "classify"),
        ("classify", "gpt_pairs", "translate"),
    ],
)
def test_a_checkpoint_of_another_kind_is_refused_naming_the_command_for_it(trained, command, run, serves):
    from transformer_lab.commands.cli import command as declared

    run_dir = trained(run)
    refusal = f"which `{command}` cannot use: python -m transformer_lab {serves} "
    text = {} if command == "sample" else {"text": "x"}
    with pytest.raises(UserError, match=refusal):  # the command
        list(declared(command).run({"ckpt": str(run_dir), **text}))
    verb = getattr(transformer_lab.load(run_dir), "generate" if command == "sample" else command)
    with pytest.raises(UserError, match=refusal):  # the API's verb, the same check
        verb(*text.values())


def test_the_command_a_refusal_names_is_one_to_paste_whatever_the_path(trained, tmp_path):
    import shlex
    import shutil

    from transformer_lab.commands.cli import command as declared

    moved = tmp_path / "a b, c é's"
    shutil.copytree(trained("gpt_equations"), moved)
    with pytest.raises(UserError) as refused:
        list(declared("sample").run({"ckpt": str(moved)}))
    pasted = str(refused.value).rpartition("cannot use: ")[2]
    assert shlex.split(pasted) == [
        "python",
        "-m",
        "transformer_lab",
        "answer",
        str(moved / "checkpoints" / "best.ckpt"),
    ]


@needs_shakespeare
def test_evaluate_on_a_users_text_file(trained, tmp_path):
    from transformer_lab.commands.evaluate import evaluate

    run_dir = trained("gpt_text")
    text = SHAKESPEARE.read_text(encoding="utf-8")
    held_out = tmp_path / "held_out.txt"  # the run's own validation text, as a user's file: the same windows
    held_out.write_text(text[int(len(text) * 0.9) :], encoding="utf-8")
    on_file = evaluate(
        str(run_dir), "val", [f"data.path={held_out}", "trainer.limit_val_batches=3"], str(tmp_path / "a.json")
    )
    on_run = evaluate(str(run_dir), "val", ["trainer.limit_val_batches=3"], str(tmp_path / "b.json"))
    assert on_file["metrics"]["val/loss"] == pytest.approx(on_run["metrics"]["val/loss"], abs=1e-6)
    assert math.isfinite(on_file["metrics"]["val/ppl"])
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("Ça va? " * 100, encoding="utf-8")
    with pytest.raises(
        DataUnavailableError, match=r"^data.path: .*foreign.txt has characters not in the vocabulary: \['Ç'\]"
    ):
        evaluate(str(run_dir), "val", [f"data.path={foreign}"], str(tmp_path / "c.json"))


def test_evaluate_on_a_users_tsv(trained, tmp_path):
    from transformer_lab.commands.evaluate import evaluate

    run_dir = trained("gpt_pairs")
    _, datamodule = set_up(run_dir)
    tsv = tmp_path / "test_pairs.tsv"  # the run's own test pairs, as a user's file: every line is evaluated
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in datamodule.data.text["test"]), encoding="utf-8")
    on_file = evaluate(str(run_dir), "test", [f"data.path={tsv}", "task.decode.beam_size=2"], str(tmp_path / "a.json"))
    on_run = evaluate(str(run_dir), "test", ["task.decode.beam_size=2"], str(tmp_path / "b.json"))
    for key in ("test/bleu", "test/loss"):
        assert on_file["metrics"][key] == pytest.approx(on_run["metrics"][key], abs=1e-6)


@pytest.mark.parametrize("module", ["sample", "translate", "fill", "classify", "evaluate"])
def test_inference_commands_have_help(module, capsys):
    import importlib

    importlib.import_module(f"transformer_lab.commands.{module}").main(["--help"])
    out = capsys.readouterr().out
    assert f"python -m transformer_lab {module} outputs/DATE/TIME" in out
    if module != "evaluate":
        assert "ckpt=RUN_DIR_OR_CKPT (or the first word)" in out and "device='cpu'" in out


@pytest.mark.parametrize(
    "name",
    [
        "t5_text",
        "bert_equations",
        "gpt_pairs",
        "gpt_equations",
        "encdec_equations",
        "t5_pairs",
        "t5_translation",
        "t5_equations",
        "bert_text",
        "bert_pairs",
        "encdec_text",
    ],
)
def test_evaluate_gives_each_models_best_validation_again(trained, tmp_path, name):
    # every model x data x task but two tested elsewhere (gpt on text: test_train.py; encdec on pairs:
    # test_translation.py)
    import json

    from transformer_lab.commands.evaluate import evaluate

    run_dir = trained(name)
    summary = json.loads((run_dir / "summary.json").read_text())
    moved = tmp_path / "my run, café ☃'s"  # (a folder Hydra's grammar reads only quoted: the command quotes it)
    shutil.copytree(run_dir, moved)
    result = evaluate(str(moved), "val", ["trainer.limit_val_batches=2"], str(tmp_path / "eval.json"))
    assert result["checkpoint"] == str(moved / "checkpoints" / "best.ckpt")
    assert result["metrics"]["val/loss"] == pytest.approx(summary["val/loss_best"], abs=1e-5)


@pytest.mark.parametrize(
    "command, run, options, message",
    [
        ("sample", "gpt_equations", ["num_samples=0"], "num_samples: must be an integer >= 1, got 0"),
        ("sample", "gpt_equations", ["num_samples=two"], "num_samples: must be an integer >= 1, got 'two'"),
        ("sample", "gpt_equations", ["max_new_tokens=-3"], "max_new_tokens: must be an integer >= 1, got -3"),
        ("sample", "gpt_equations", ["prompt="], "prompt: is empty"),
        ("sample", "gpt_equations", ["top_k=0"], "top_k: must be an integer >= 1 or null, got 0"),
        ("sample", "gpt_equations", ["temperature=hot"], "temperature: must be a number >= 0, got 'hot'"),
        ("sample", "gpt_equations", ["device=cuda:7"], "device: cuda:7 asks for a CUDA GPU but torch sees"),
        ("sample", "gpt_equations", ["device=meta"], "device: 'meta': only cpu, cuda, cuda:N or mps"),
        ("translate", "gpt_pairs", ["text=", "beam_size=2"], "text: is empty"),
        ("translate", "gpt_pairs", ["text=ein Hund", "beam_size=0"], "beam_size: must be an integer >= 1, got 0"),
        ("translate", "gpt_pairs", ["text=ein Hund", "batch_size=1.5"], "batch_size: must be an integer >= 1, got 1.5"),
        ("translate", "gpt_pairs", ["text=ein Hund", "length_penalty=-1"], "length_penalty: must be a number >= 0"),
        ("classify", "bert_equations", ["text=3 + 5 =", "top=0"], "top: must be an integer >= 1, got 0"),
        (
            "classify",
            "bert_equations",
            ["text=3 + 5 =", "device=tpu"],
            "device: 'tpu' is not a device; use cpu, cuda, cuda:N or mps",
        ),
        ("classify", "bert_equations", [], "no input: give text=... or one input a line on standard input"),
        ("fill", "t5_pairs", ["text=ein <X0>", "max_len=0"], "max_len: must be an integer >= 1, got 0"),
        ("fill", "t5_pairs", ["text=ein <X0>", "spans=maybe"], "spans: must be true or false, got 'maybe'"),
        ("evaluate", "gpt_equations", ["out=."], "out=.: give a file name"),
        ("evaluate", "gpt_equations", ["split=train"], "split: must be one of val, test, got 'train'"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_inference_option_is_one_line_and_exit_2(trained, command, run, options, message, capsys, monkeypatch):
    """Each command's options as typed: a wrong type, a count below one, an empty text, a device this
    machine lacks: one `error:` line naming the option, exit code 2, and no output."""
    import importlib
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))  # (no input lines at all)
    main, run_dir = importlib.import_module(f"transformer_lab.commands.{command}").main, trained(run)
    capsys.readouterr()  # (what training printed)
    with pytest.raises(SystemExit) as exit_:
        main([str(run_dir), *options])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "" and err == f"error: {err[7:]}" and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1


def test_translate_refuses_standard_input_that_is_not_utf8(trained, capsys, monkeypatch):
    import io

    from transformer_lab.commands.translate import main

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("ein Hund\nzwei H\xfcnde\n".encode("latin-1"))))
    run_dir = trained("gpt_pairs")
    with pytest.raises(SystemExit) as exit_:
        main([str(run_dir), "beam_size=1"])
    assert exit_.value.code == 2
    assert "error: standard input, line 2: not UTF-8 text (byte 0xfc)" in capsys.readouterr().err


def test_evaluate_writes_into_a_folder_it_creates(trained, tmp_path):
    from transformer_lab.commands.evaluate import evaluate

    out = tmp_path / "new" / "folder" / "eval.json"
    evaluate(str(trained("gpt_equations")), out=str(out))
    assert out.is_file() and "val/loss" in out.read_text()
    mine = tmp_path / "mine.json"  # (a file that exists is the user's: kept, as predictions= keeps one)
    mine.write_text("mine\n")
    with pytest.raises(UserError, match=rf"^out={mine}: the file exists; give another name, or overwrite=true to"):
        evaluate(str(trained("gpt_equations")), out=str(mine))
    assert mine.read_text() == "mine\n"
    evaluate(str(trained("gpt_equations")), out=str(mine), overwrite=True)
    assert "val/loss" in mine.read_text()


def test_an_encode_failing_its_own_way_is_that_lines_warning():
    from transformer_lab.batching.base import encoder

    class Mine:
        def encode(self, text):
            return [{"a": 0}[c] for c in text]  # a KeyError for any other character

    encode = encoder(Mine())
    assert encode("aa") == [0, 0]
    with pytest.raises(ValueError, match=r"^Mine.encode\(\) failed on it \(KeyError: 'x'\)$"):
        encode("ax")


def test_translate_refuses_a_model_without_what_decoding_calls():
    from torch import nn

    from transformer_lab.api.inference import check_decoding
    from transformer_lab.errors import ConfigError

    class Greedy(nn.Module):
        architecture = "decoder"

        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None): ...

    check_decoding(Greedy(), 1)
    with pytest.raises(ConfigError, match=r"^beam_size: Greedy has no new_cache\(\) to translate with; beam_size=1"):
        check_decoding(Greedy(), 4)

    class Halves(nn.Module):
        architecture = "encoder-decoder"

    with pytest.raises(ConfigError, match=r"^ckpt: Halves has no encode\(\), decode\(\), new_cache\(\) to translate"):
        check_decoding(Halves(), 1)


def test_the_grammars_words_and_values():
    from transformer_lab.commands.cli import command, parse

    sample = command("sample")
    assert parse(["run", "max_new_tokens=1e3", "temperature=1"], sample) == {
        "ckpt": "run",
        "max_new_tokens": 1000,
        "temperature": 1,
    }
    with pytest.raises(UserError, match=r"^expected key=value, got 'run' \(ckpt= is given too\)$"):
        parse(["ckpt=x", "run"], sample)
    assert parse(["overwrite=yes"], command("export"))["overwrite"] == "yes"  # (then refused: true or false)
    assert parse(["a,b"], command("compare"))["paths"] == ["a,b"] and parse(["paths=a,b"], command("compare"))[
        "paths"
    ] == ["a", "b"]
    # a command that takes the run's config keys too: one a letter away from its own option is that option's typo
    evaluate = command("evaluate")
    with pytest.raises(UserError) as typo:
        parse(["run", "splt=test"], evaluate)
    assert str(typo.value) == (
        "unknown option 'splt' (did you mean split?); evaluate takes: ckpt, split, out, weights, predictions, overwrite "
        "(--help)"
    )
    with pytest.raises(UserError, match=r"^unknown option 'promt' \(did you mean prompt\?\); sample takes: "):
        parse(["run", "promt=ROMEO:"], sample)
    assert parse(["run", "seed=3", "task.decode.beam_size=2"], evaluate)["overrides"] == [
        "seed=3",
        "task.decode.beam_size=2",
    ]


def test_a_path_holding_an_equals_sign_is_a_path(tmp_path, monkeypatch):
    from transformer_lab.commands.cli import command, parse

    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr=0.1").mkdir()
    assert parse(["lr=0.1"], command("sample")) == {"ckpt": "lr=0.1"}
    assert parse(["lr=0.1", "split=test"], command("evaluate")) == {"ckpt": "lr=0.1", "split": "test", "overrides": []}


def test_a_file_that_is_no_checkpoint_is_named_so(tmp_path):
    from transformer_lab.store.checkpoint import read_checkpoint

    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(UserError, match=r"summary.json is not a checkpoint \(a .ckpt that train.py wrote\)"):
        read_checkpoint(tmp_path / "summary.json")


def test_where_evaluate_and_compare_write_and_what_they_read_are_checked_before_they_work(
    trained, tmp_path, capsys, monkeypatch
):
    """A destination inside a run, under a file, or taken twice, and a path holding no run beside one that does: one
    line before the model loads or the table prints (a stranger's finds: refused only after validation, the
    predictions written first; a plot written into the working folder on out=; a path dropped without a word)."""
    from transformer_lab.commands import attention, compare, evaluate

    run_dir, a_file, other = trained("gpt_equations"), tmp_path / "a-file", tmp_path / "other-run"
    a_file.write_text("")
    other.mkdir()
    (other / ".manifest").write_text("summary.json\n")  # (a run's directory: what its runs wrote)
    inside = f"inside the run directory {other.resolve()}, which a read never writes into: write it elsewhere"
    run = str(run_dir)
    for main, args, message in [
        (evaluate.main, [run, f"out={other}/m.json"], f"out={other}/m.json: {inside}"),
        (evaluate.main, [run, f"predictions={a_file}/p.jsonl"], f"predictions={a_file}/p.jsonl: cannot write it, {a_file} is a file"),
        (evaluate.main, [run, f"out={tmp_path}/e.json", f"predictions={tmp_path}/e.json"],
         f"predictions={tmp_path}/e.json: the same file as out=; give each its own"),
        (compare.main, [run, "plot=val/loss", f"out={other}/c.png"], f"out={other}/c.png: {inside}"),
        (compare.main, [run, "plot=val/loss", "out="], "out=: give a file name or a folder (the plot goes there)"),
        (compare.main, [run, str(tmp_path / "none")], f"{tmp_path / 'none'}: no such file or directory"),
        (compare.main, [str(a_file)], f"{a_file}: a file, not a run directory or sweep (give the folder of its run)"),
        (compare.main, [str(other)], f"no run directories (with a summary.json) under {other}"),
    ]:  # fmt: skip
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            main(args)
        assert (exit_.value.code, *capsys.readouterr()) == (2, "", f"error: {message}\n")
    monkeypatch.chdir(other)  # (attention's default folder, attention/N, is the current folder's: here a run's)
    monkeypatch.setattr("transformer_lab.api.run.load", lambda *a: pytest.fail("the model loaded before the check"))
    with pytest.raises(SystemExit) as exit_:
        attention.main([run, "text=3 + 5 ="])
    assert (exit_.value.code, *capsys.readouterr()) == (2, "", f"error: attention/1: {inside}\n")
    assert compare.main([run, str(a_file), str(other)]) == 0  # (beside a run: each said, none dropped unsaid)
    assert (
        capsys.readouterr().err == f"warning: left out {a_file} {other}: no run directory (with a summary.json) there\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "other-run"]
    assert [p.name for p in other.iterdir()] == [".manifest"]
