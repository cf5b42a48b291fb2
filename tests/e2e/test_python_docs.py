"""docs/python.md's TransformerLens examples, one per family, run as written on a tiny run trained by the command
above each (made tiny by overrides added after it): every line runs, and each attention pattern it shows is
(batch, heads, queries, keys) of that run's model."""

import re

import pytest
import torch

import transformer_lab
from helpers.runs import ROOT, needs_shakespeare

pytest.importorskip("transformer_lens")

TINY = (
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "trainer.max_steps=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
    "logger=none",
)


def examples() -> dict[str, tuple[list[str], str]]:
    """The examples' block: each family's `# FAMILY ...: python train.py OVERRIDES` header (the last of several
    headers over one snippet gives its own command) and its code."""
    text = (ROOT / "docs" / "python.md").read_text()
    block = re.search(r"runs them on tiny ones\):\n\n((?:    .*\n|\n)+)", text).group(1)
    found, headers, code = {}, [], []
    for line in [*block.splitlines(), ""]:
        line = line.removeprefix("    ")
        if line.startswith("# ") and "python train.py " in line:
            if code:
                found.update({family: (overrides, "\n".join(code)) for family, overrides in headers})
                headers, code = [], []
            family = line[2:].split()[0].rstrip(":")
            headers.append((family, line.split("python train.py ", 1)[1].split()))
        elif line.strip():
            code.append(line)
    found.update({family: (overrides, "\n".join(code)) for family, overrides in headers})
    return found


def test_there_is_an_example_for_each_family():
    assert sorted(examples()) == ["bert", "encdec", "gpt", "t5"]


@needs_shakespeare
@pytest.mark.parametrize("family", ["gpt", "bert", "t5", "encdec"])
def test_a_family_example_runs_as_written(family, tmp_path):
    overrides, code = examples()[family]
    if "data=translation" in overrides:  # (a toy pair file: Multi30k's BPE takes a minute to learn)
        pairs = "\n".join(f"Ein Hund {i}\tA dog {i}" for i in range(50))
        (tmp_path / "pairs.tsv").write_text(pairs + "\n")
        overrides = [
            *overrides,
            f"data.path={tmp_path / 'pairs.tsv'}",
            "data.vocab_size=100",
            f"paths.data_dir={tmp_path}",
        ]
    run = transformer_lab.train(*overrides, *TINY, f"hydra.run.dir={tmp_path / 'run'}")
    shown = {"run": run, "torch": torch}
    exec(code, shown)
    patterns = re.findall(r'^(cache\["[\w.]+"\])', code, flags=re.M)
    assert patterns
    for pattern in patterns:
        assert eval(pattern, shown).shape[:2] == (1, 2), pattern  # (batch 1, model.n_head=2)
