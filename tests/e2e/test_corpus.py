"""Text corpora (data=text) through train.py: every objective trains on one corpus cache. The corpus itself
(sources, the split, tokenizers, the cache on disk) is tests/unit/test_corpus.py."""

import json

import pytest

from helpers.runs import ROOT, TINY, needs_shakespeare, run_command, run_train


@needs_shakespeare
@pytest.mark.parametrize(
    "objective",
    [["model=gpt"], ["model=t5", "task.input_length=24"], ["model=bert", "task=mlm", "task.length=24"]],
    ids=["gpt", "t5", "bert"],
)
def test_every_objective_trains_on_one_corpus_cache(objective, tmp_path_factory):
    """gpt's next tokens, t5's spans and bert's masked tokens, from the same cache (written by whichever runs
    first; the others read it), each with a falling loss."""
    cache = tmp_path_factory.getbasetemp() / "shared_corpus_cache"
    run_dir = tmp_path_factory.mktemp("run")
    result = run_train(
        *objective,
        "data=text",
        f"data.path={ROOT / 'data/shakespeare/input.txt'}",
        "data.tokenizer=bpe",
        "data.vocab_size=512",
        "data.val_fraction=0.1",
        f"data.cache_dir={cache}",
        "data.block_size=24",
        "data.batch_size=16",
        *TINY,
        "optim.lr=3e-3",
        "trainer.max_steps=60",
        "trainer.val_check_interval=30",
        "logger=csv",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [line["val/loss"] for line in lines if "val/loss" in line]
    assert len(val) == 2 and val[-1] < val[0] < 7
    assert len(list((cache / "shards").glob("*.train.bin"))) == 1  # one cache for all three
    assert json.loads((run_dir / "summary.json").read_text())["val/bpb"] > 0
    shown = {"model=gpt": "sample at step", "model=t5": "span fills at step", "model=bert": "masked-token predictions"}
    assert shown[objective[0]] in result.stdout + result.stderr  # what each shows at validation
    if objective == ["model=gpt"]:  # the checkpoint carries the tokenizer: sampling needs no cache
        import shutil

        shutil.rmtree(cache)
        sample = run_command("sample", run_dir, "prompt=ROMEO:", "max_new_tokens=20")
        assert sample.returncode == 0, sample.stderr[-2000:]
        assert sample.stdout.startswith("ROMEO:") and len(sample.stdout) > len("ROMEO:") + 5
