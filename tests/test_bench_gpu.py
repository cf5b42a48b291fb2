"""benchmarks/gpu.py (`make bench-gpu`): its matrix in --smoke form on the CPU, its errors, and how it records."""

import importlib.util
import json
import math
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, needs_shakespeare

SCRIPT = ROOT / "benchmarks" / "gpu.py"
spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
bench = sys.modules["bench_gpu"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(bench)

MULTI30K = ROOT / "data" / "multi30k"


def run_script(*args, timeout=300):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_matrix_is_the_issue_s():
    names = [e.name for e in bench.MATRIX]
    assert names == [
        "shakespeare_char/gpu",
        "shakespeare_char/gpu_bf16",
        "shakespeare_char/gpu_bf16_compile",
        "shakespeare_char/gpu_fp16",
        "multi30k_de_en/gpu_bf16",
        "shakespeare_char/ddp_bf16",
    ]
    for entry in bench.MATRIX:  # every preset named has its results file, where the figures go
        assert (ROOT / "experiments" / f"{entry.preset}.yaml").exists()
        assert (ROOT / "experiments" / f"{entry.preset}.md").exists()


@pytest.mark.e2e
@needs_shakespeare
@pytest.mark.skipif(not MULTI30K.exists(), reason=f"{MULTI30K} missing: run `make data`")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU form of --smoke; with CUDA it runs on the GPU")
def test_smoke_runs_the_matrix_on_the_cpu(tmp_path):
    presets = {p: (ROOT / "experiments" / f"{p}.md").read_text() for p in ("shakespeare_char", "multi30k_de_en")}
    # On the CPU, fp16 runs bf16's path, TF32 is plain fp32 (run by most tests), model.compile=true is the
    # same entry plus 35 s of compilation and DDP over 2 CPU processes is tests/test_ddp.py's: their commands
    # are checked, the rest of the matrix runs.
    entries = {e.name: e for e in bench.MATRIX}
    assert "hardware=cpu" in bench.command(entries["shakespeare_char/gpu"], tmp_path, smoke=True, cuda=False)
    fp16 = bench.command(entries["shakespeare_char/gpu_fp16"], tmp_path, smoke=True, cuda=False)
    assert "hardware=[cpu,bf16]" in fp16
    compiled = bench.command(entries["shakespeare_char/gpu_bf16_compile"], tmp_path, smoke=True, cuda=False)
    assert "model.compile=true" in compiled
    ddp = bench.command(entries["shakespeare_char/ddp_bf16"], tmp_path, smoke=True, cuda=False)
    assert "trainer.devices=2" in ddp and "hardware=[ddp,bf16]" in ddp
    skipped = ("gpu", "gpu_fp16", "gpu_bf16_compile", "ddp_bf16")
    only = [name for name in entries if name.rsplit("/", 1)[1] not in skipped]
    proc = run_script("--smoke", "--out", str(tmp_path), "--only", *only)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {r["name"]: r for r in json.loads((tmp_path / "gpu.json").read_text())["runs"]}
    assert list(runs) == only
    for name, r in runs.items():
        assert r["status"] == "completed" and r["returncode"] == 0, name
        assert r["global_step"] == 3 and r["tokens_per_sec"] > 0 and math.isfinite(r["val/loss"]), name
        assert r["device"].startswith("CPU") and r["torch"] == torch.__version__, name
    assert runs["multi30k_de_en/gpu_bf16"]["test/bleu"] is not None  # test stage with beam search ran
    table = (tmp_path / "gpu.md").read_text()
    assert all(f"`{name}`" in table for name in only)
    # a smoke run records nothing: the presets' figures are untouched
    assert {p: (ROOT / "experiments" / f"{p}.md").read_text() for p in presets} == presets


@pytest.mark.e2e
def test_mistakes_are_one_line(tmp_path):
    proc = run_script("--smoke", "--only", "shakespeare_char/tpu", "--out", str(tmp_path))
    assert (
        proc.returncode == 2
        and "--only: unknown shakespeare_char/tpu; the matrix is: shakespeare_char/gpu" in proc.stderr
    )
    if not torch.cuda.is_available():
        proc = run_script("--out", str(tmp_path))
        assert proc.returncode == 2 and "no CUDA GPU is visible; --smoke runs the matrix on the CPU" in proc.stderr
    assert "Traceback" not in proc.stderr


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
