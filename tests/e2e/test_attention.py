"""`python -m transformer_lab attention RUN text=...` on runs of every model: one PNG per kind of attention,
the weights saved beside it with the tokens on both axes, rows summing to 1, causal where the model is, the
cross-attention target by source; and its refusals, one line each."""

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers.runs import TINY, needs_shakespeare, run_train
from helpers.translation import write_pairs
from transformer_lab.commands.attention import attention
from transformer_lab.errors import UserError

SHORT = [*TINY, "trainer.max_steps=3", "trainer.val_check_interval=3", "logger=csv", "callbacks.throughput=null"]


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path, monkeypatch):
    """The command's default folder (attention/N) and compare's plot are the current folder's."""
    monkeypatch.chdir(tmp_path)


def train(run, *overrides):
    result = run_train(*SHORT, *overrides, f"hydra.run.dir={run}")
    assert result.returncode == 0, result.stderr[-3000:]
    return run


def drawn(run, **options):
    lines = list(attention({"ckpt": str(run), **{k: str(v) if k == "out" else v for k, v in options.items()}}))
    folder = Path(lines[-1]).parent  # (out=, or attention/N in the current folder)
    assert lines[-2:] == [str(folder / "attention.safetensors"), str(folder / "tokens.json")]  # (each file it wrote)
    lines = lines[:-1]
    assert folder == Path(options.get("out", folder)) and not (run / "attention").exists()  # (never into the run)
    maps = load_file(folder / "attention.safetensors")
    tokens = json.loads((folder / "tokens.json").read_text())
    assert lines[-1] == str(folder / "attention.safetensors")
    assert all(line.endswith(".png") and (folder / line.rsplit("/", 1)[1]).stat().st_size > 1000 for line in lines[:-1])
    for name, weights in maps.items():
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), msg=name)
    return [line.rsplit("/", 1)[1] for line in lines[:-1]], maps, tokens


def test_gpt_on_equations_and_bert_classifier(tmp_path):
    gpt = train(tmp_path / "gpt", "data=modular", "data.p=11")
    pngs, maps, tokens = drawn(gpt, text="3 + 5 =")
    assert pngs == ["blocks.attn.png"] and tokens["source"] == ["3", "+", "5", "="]
    assert set(maps) == {"blocks.0.attn"} and maps["blocks.0.attn"].shape == (2, 4, 4)  # heads, queries, keys
    assert (maps["blocks.0.attn"].triu(1) == 0).all()  # causal
    again = list(attention({"ckpt": str(gpt), "text": "1 + 2 ="}))
    assert again[0] == str(Path("attention", "2", "blocks.attn.png"))  # a new folder, nothing overwritten
    assert not (gpt / "attention").exists()  # (a read never writes into the run)

    bert = train(tmp_path / "bert", "data=modular", "data.p=11", "model=bert")
    pngs, maps, tokens = drawn(bert, text="3 + 5 =", out=tmp_path / "mine")
    assert pngs == ["encoder.self_attn.png"] and tokens["source"] == ["<bos>", "3", "+", "5", "="]
    assert maps["encoder.0.self_attn"].shape == (2, 5, 5) and (maps["encoder.0.self_attn"].triu(1) > 0).any()


@pytest.mark.parametrize("model", ["encdec", "t5"])
def test_encoder_decoders_draw_the_source_target_alignment(tmp_path, model):
    pairs = write_pairs(tmp_path / "pairs.tsv", n=200)
    extra = ["model.d_ff=64"] if model == "t5" else []
    run = train(tmp_path / "run", f"model={model}", "data=translation", f"data.path={pairs}",
                "data.vocab_size=120", f"paths.data_dir={tmp_path / 'data'}", *extra)  # fmt: skip
    pngs, maps, tokens = drawn(run, text=pairs.read_text().split("\t")[0], max_extra_len=6)
    assert pngs == ["encoder.self_attn.png", "decoder.self_attn.png", "decoder.cross_attn.png"]
    S, T = len(tokens["source"]), len(tokens["target"])
    assert tokens["source"][-1] == "<eos>" and 1 < T <= S + 7 and tokens["target"][0] in ("<bos>", "<pad>")
    heads = 2
    assert maps["encoder.0.self_attn"].shape == (heads, S, S)
    assert maps["decoder.0.self_attn"].shape == (heads, T, T) and (maps["decoder.0.self_attn"].triu(1) == 0).all()
    assert maps["decoder.0.cross_attn"].shape == (heads, T, S)

    with pytest.raises(
        UserError, match=r"text: \d+ tokens, more than the model read in training \(\d+, data.max_tokens\)"
    ):
        list(attention({"ckpt": str(run), "text": "a b c d " * 100}))

    given = drawn(run, text="a b", target="c d e", out=tmp_path / "given")[2]
    assert len(given["target"]) == 1 + len(given["target"][1:]) and given["target"][0] in ("<bos>", "<pad>")


def test_refusals_are_one_line(tmp_path):
    run = train(tmp_path / "gpt", "data=modular", "data.p=11")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    cases = [
        ({"text": "3 + 5 + 7 ="}, "text: expected an equation of the form `a + b =` (data.op=+, data.terms=2)"),
        ({}, 'text: which input? give text="..."'),
        ({"text": "3 + 5 =", "out": str(tmp_path / "full")}, "exists and is not an empty folder"),
    ]
    for options, message in cases:
        with pytest.raises(UserError) as info:
            list(attention({"ckpt": str(run), **options}))
        assert message in str(info.value)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


@needs_shakespeare
def test_characters_are_labelled_as_themselves_and_a_text_too_long_is_one_line(tmp_path):
    run = train(tmp_path / "lm", "data=shakespeare", "data.block_size=16")
    assert drawn(run, text="a b\n!")[2]["source"] == ["a", "␣", "b", "\\n", "!"]  # (ids 0-3 are characters here)
    with pytest.raises(UserError) as info:  # (the command line's one `error:` line: the GRU's test, test_extension)
        list(attention({"ckpt": str(run), "text": "x" * 40}))
    assert str(info.value) == "text: 40 tokens, more than the model reads (16, model.block_size): shorten it"
    assert [p.name for p in Path("attention").iterdir()] == ["1"]  # (the first call's)

    mlm = train(tmp_path / "mlm", "data=shakespeare", "data.block_size=16", "model=bert", "task=mlm")
    tokens, maps = (
        drawn(mlm, text="Ro[MASK]eo")[2]["source"],
        load_file(Path("attention", "2", "attention.safetensors")),  # (the second call's)
    )
    assert tokens == ["[CLS]", "R", "o", "[MASK]", "e", "o"] and maps["encoder.0.self_attn"].shape == (2, 6, 6)


def test_what_cannot_be_drawn_is_refused_and_nothing_is_half_written(tmp_path, monkeypatch):
    import transformer_lab.analysis.attention as analysis
    from transformer_lab.commands.attention import put_in_place

    run = train(tmp_path / "gpt", "data=modular", "data.p=11")
    for options, message in [
        ({"text": "3 + 5 =", "target": "8"}, "target: only an encoder-decoder has one; GPT reads the text alone"),
        (
            {"text": "3 + 5 =", "max_extra_len": 513},
            "max_extra_len: at most 512 (the maps of longer targets are not drawn)",
        ),
    ]:
        with pytest.raises(UserError, match=re.escape(message)):
            list(attention({"ckpt": str(run), **options}))

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "draw", interrupted)  # (the command imports it where it runs)
    with pytest.raises(KeyboardInterrupt):
        list(attention({"ckpt": str(run), "text": "3 + 5 ="}))
    assert not Path("attention").exists() or not any(Path("attention").iterdir())

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "theirs.png").write_text("another call's")
    (tmp_path / "ours").mkdir()
    with pytest.raises(UserError, match="another call wrote there first"):
        put_in_place(tmp_path / "ours", tmp_path / "taken", given=True)  # (two calls with one out=: the second)
    assert not (tmp_path / "ours").exists() and (tmp_path / "taken" / "theirs.png").read_text() == "another call's"
    (tmp_path / "ours").mkdir()
    (tmp_path / "attention" / "1").mkdir(parents=True)
    (tmp_path / "attention" / "1" / "a.png").write_text("an earlier call's")
    assert put_in_place(tmp_path / "ours", tmp_path / "attention" / "1", given=False) == tmp_path / "attention" / "2"


def test_callbacks_log_attention_maps_and_the_fourier_spectrum_as_wandb_images(tmp_path):
    from transformer_lab.commands.compare import compared

    run = train(tmp_path / "run", "data=modular", "data.p=11", "trainer.max_steps=4",
                "trainer.val_check_interval=2", "callbacks=[default,attention,progress]",
                "callbacks.attention.text='3 + 5 ='", "callbacks.progress.images=true", "logger=wandb")  # fmt: skip
    (offline,) = (run / "wandb").glob("offline-run-*")
    images = sorted(p.name.rsplit("_", 2)[0] for p in (offline / "files" / "media" / "images").rglob("*.png"))
    assert images == ["blocks.attn"] * 2 + ["embedding_spectrum"] * 2  # at steps 2 and 4
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in rows if "progress/excluded_loss" in r]
    assert [r["step"] for r in measured] == [2, 4] and all(r["progress/key_frequencies"] >= 1 for r in measured)
    assert all(sum(r[f"progress/embed_freq_{k}"] for k in range(1, 6)) == pytest.approx(1) for r in measured)
    lines = list(compared({"paths": [str(run)], "plot": ["progress/excluded_loss", "progress/restricted_loss"]}))
    assert lines[-1] == "plot: compare.png" and Path("compare.png").stat().st_size > 1000  # (the current folder's)


def test_without_wandb_the_images_are_pngs_in_the_run(tmp_path):
    run = train(tmp_path / "run", "data=modular", "data.p=11", "trainer.max_steps=4",
                "trainer.val_check_interval=2", "callbacks=[default,attention,progress]",
                "callbacks.attention.text='3 + 5 ='", "callbacks.attention.every_n_steps=4",
                "callbacks.progress.images=true")  # fmt: skip
    assert sorted(p.relative_to(run).as_posix() for p in (run / "attention").rglob("*")) == [
        "attention/step_4", "attention/step_4/blocks.attn.png"]  # fmt: skip
    assert sorted(p.name for p in (run / "progress").iterdir()) == ["spectrum_step_2.png", "spectrum_step_4.png"]
