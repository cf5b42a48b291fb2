"""A toy translation pair file, and a translation run's BLEU checked against what it wrote."""

import json

import pytest
import sacrebleu
import torch


def write_pairs(path, n=400):
    """A toy language pair: the target is the source's words reversed, in capitals."""
    words = "red blue green dog cat bird runs sleeps jumps over under near the a big small".split()
    g = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(n):
        sentence = [
            words[i] for i in torch.randint(len(words), (int(torch.randint(3, 8, (1,), generator=g)),), generator=g)
        ]
        lines.append(" ".join(sentence) + "\t" + " ".join(w.upper() for w in reversed(sentence)))
    path.write_text("\n".join(lines) + "\n")
    return path


def bleu_matches_the_written_translations(run, pairs_file, min_test_bleu):
    """Every BLEU a run logged equals sacrebleu.corpus_bleu on the outputs and references it wrote to
    translations/, and every written (source, reference) is a pair of the data file (no misalignment)."""
    pairs = {tuple(line.split("\t")) for line in pairs_file.read_text().splitlines()}
    logged = {r["step"]: r["val/bleu"] for r in map(json.loads, (run / "metrics.jsonl").open()) if "val/bleu" in r}
    summary = json.loads((run / "summary.json").read_text())
    files = sorted((run / "translations").glob("*.jsonl"))
    assert [f.name for f in files if f.name.startswith("val-")] == [f"val-step{s:06d}.jsonl" for s in sorted(logged)]
    for f in files:
        records = [json.loads(line) for line in f.open()]
        assert {(r["source"], r["reference"]) for r in records} <= pairs
        assert [r["row"] for r in records] == sorted({r["row"] for r in records})  # each row once, in order
        score = sacrebleu.corpus_bleu([r["output"] for r in records], [[r["reference"] for r in records]]).score
        split, step = f.stem.split("-step")
        assert score == pytest.approx(
            logged[int(step)] if split == "val" else summary["test/bleu"], abs=1e-5
        )  # logged as float32
    assert summary["test/bleu"] > min_test_bleu  # a tiny model learns some of the reversal (chance: about 0)
    return scored_test_set(run)


def scored_test_set(run):
    """What a run's test BLEU scored: one record per test sentence (source, output, reference)."""
    (test_file,) = (run / "translations").glob("test-*.jsonl")
    return [json.loads(line) for line in test_file.open()]
