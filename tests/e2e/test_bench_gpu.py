"""benchmarks/gpu.py (`make bench-gpu`): its matrix in --smoke form on the CPU, its errors, and how it records.

Here: its --smoke run and its errors, as a command; tests/unit/test_bench_gpu.py has the rest."""

import json
import math

import pytest
import torch

from helpers.bench_gpu import SCRIPT, bench
from helpers.runs import ROOT, needs_shakespeare, run_script

MULTI30K = ROOT / "data" / "multi30k"


def run_gpu_script(*args):
    """`python benchmarks/gpu.py ARGS` (in this process: the trainings it starts are processes of their own)."""
    return run_script(SCRIPT, *args)


@needs_shakespeare
@pytest.mark.skipif(not MULTI30K.exists(), reason=f"{MULTI30K} missing: run `make data`")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU form of --smoke; with CUDA it runs on the GPU")
def test_smoke_runs_the_matrix_on_the_cpu(tmp_path):
    presets = {p: (ROOT / "experiments" / f"{p}.md").read_text() for p in ("shakespeare_char", "multi30k_de_en")}
    # On the CPU, fp16 runs bf16's path, TF32 is plain fp32 (run by most tests), model.compile=true is the
    # same entry plus 35 s of compilation and DDP over 2 CPU processes is tests/e2e/test_ddp.py's: their commands
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
    proc = run_gpu_script("--smoke", "--out", str(tmp_path), "--only", *only)
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


def test_mistakes_are_one_line(tmp_path):
    proc = run_gpu_script("--smoke", "--only", "shakespeare_char/tpu", "--out", str(tmp_path))
    assert (
        proc.returncode == 2
        and "--only: unknown shakespeare_char/tpu; the matrix is: shakespeare_char/gpu" in proc.stderr
    )
    if not torch.cuda.is_available():
        proc = run_gpu_script("--out", str(tmp_path))
        assert proc.returncode == 2 and "no CUDA GPU is visible; --smoke runs the matrix on the CPU" in proc.stderr
    assert "Traceback" not in proc.stderr
