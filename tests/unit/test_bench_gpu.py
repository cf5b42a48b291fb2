"""benchmarks/gpu.py (`make bench-gpu`): its matrix in --smoke form on the CPU, its errors, and how it records.

Here: its matrix and how it records; tests/e2e/test_bench_gpu.py has the rest."""

import json

from helpers.bench_gpu import bench
from helpers.runs import ROOT


def test_matrix_is_the_issue_s():
    names = [e.name for e in bench.MATRIX]
    assert names == [
        "shakespeare_char/gpu",
        "shakespeare_char/gpu_bf16",
        "shakespeare_char/gpu_bf16_compile",
        "shakespeare_char/gpu_fp16",
        "shakespeare_char/gpu_bf16_muon",
        "multi30k_de_en/gpu_bf16",
        "shakespeare_char/ddp_bf16",
    ]
    for entry in bench.MATRIX:  # every preset named has its results file, where the figures go
        assert (ROOT / "experiments" / f"{entry.preset}.yaml").exists()
        assert (ROOT / "experiments" / f"{entry.preset}.md").exists()


def record(name, **figures):
    return {
        "name": name,
        "command": f"python train.py experiment={name.split('/')[0]}",
        "status": "completed",
        "device": "1 x GPU",
        "date": "2026-11-22",
        "torch": "2",
        "lightning": "2",
        "commit": "abc1234",
        **figures,
    }


def test_merge_replaces_a_run_s_record_and_rewrites_the_preset_sections(tmp_path):
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "shakespeare_char.md").write_text("# shakespeare_char\n\nText a person wrote.\n")
    names = [e.name for e in bench.MATRIX]
    first = [record("shakespeare_char/gpu", tokens_per_sec=1000.0), record("shakespeare_char/gpu_bf16", mfu=0.05)]
    bench.record(tmp_path, first, names, presets=False)
    bench.write_preset_sections(first, experiments)
    once = (experiments / "shakespeare_char.md").read_text()
    assert once.startswith("# shakespeare_char\n\nText a person wrote.\n") and once.count(bench.BEGIN) == 1
    assert "| 1,000 |" in once and "| 5.0% |" in once

    bench.record(tmp_path, [record("shakespeare_char/gpu", tokens_per_sec=2000.0)], names, presets=False)
    runs = json.loads((tmp_path / "gpu.json").read_text())["runs"]
    assert [r["name"] for r in runs] == ["shakespeare_char/gpu", "shakespeare_char/gpu_bf16"]  # matrix order
    assert runs[0]["tokens_per_sec"] == 2000.0 and runs[1]["mfu"] == 0.05
    bench.write_preset_sections(runs, experiments)
    twice = (experiments / "shakespeare_char.md").read_text()
    assert twice.count(bench.BEGIN) == 1 and twice.count(bench.END) == 1  # replaced, not appended again
    assert "| 2,000 |" in twice and "| 1,000 |" not in twice and "Text a person wrote." in twice


def test_gpu_md_keeps_what_a_person_wrote_under_its_table(tmp_path):
    """record() rewrites gpu.md's table from the records; the sections written by hand under it ("## The anchor":
    how to run benchmarks/anchor.py) stay, once."""
    (tmp_path / "gpu.md").write_text("# GPU benchmark\n\nold table\n\n## The anchor\n\nThe one command.\n")
    names = [e.name for e in bench.MATRIX]
    for _ in range(2):
        bench.record(tmp_path, [record("shakespeare_char/gpu", tokens_per_sec=1000.0)], names, presets=False)
    text = (tmp_path / "gpu.md").read_text()
    assert "old table" not in text and "1,000" in text
    assert text.endswith("\n\n## The anchor\n\nThe one command.\n") and text.count("## The anchor") == 1
