"""benchmarks/anchor.py (issue #57: nanoGPT's recipe as a bare loop beside train.py's recipes, time to a target) in its
--smoke form on the CPU: every recipe a process of its own stopped at its first validation <= the target, the
table, gpu.py's rows after it; and its mistakes, one line each."""

import importlib.util
import json
import sys

import pytest
import torch

from helpers.runs import ROOT, needs_shakespeare, run_script

SCRIPT = ROOT / "benchmarks" / "anchor.py"
spec = importlib.util.spec_from_file_location("bench_anchor", SCRIPT)
anchor = sys.modules["bench_anchor"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(anchor)

RECORDED = [ROOT / "benchmarks" / name for name in ("anchor.json", "anchor.md", "gpu.json", "gpu.md")]


def recorded() -> dict:
    return {p.name: p.read_text() if p.exists() else None for p in RECORDED} | {
        "shakespeare_char.md": (ROOT / "experiments" / "shakespeare_char.md").read_text()
    }


@needs_shakespeare
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU form of --smoke; with CUDA it runs on the GPU")
def test_smoke_stops_every_recipe_at_the_target_and_tabulates_it(tmp_path):
    # On the CPU the compiled Muon recipe runs uncompiled (inductor's C++ would take ~35 s): its GPU command keeps
    # model.compile=true; the anchor's compiled path runs, traced by dynamo (--compile-backend=eager).
    compiled = next(r for r in anchor.RECIPES if r.name == "muon_bf16_compile")
    assert "model.compile=true" in anchor.train_overrides(compiled, smoke=False, cuda=True)
    assert "model.compile=true" not in anchor.train_overrides(compiled, smoke=True, cuda=False)
    before = recorded()
    proc = run_script(SCRIPT, "--smoke", "--out", tmp_path, "--bench-gpu", "shakespeare_char/gpu_bf16_muon")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    record = json.loads((tmp_path / "anchor.json").read_text())
    assert record["target"] == anchor.SMOKE_TARGET and record["smoke"] and record["rounds"] == 1
    assert record["meta"]["device"].startswith("CPU") and record["meta"]["torch"] == torch.__version__
    assert [r["name"] for r in record["recipes"]] == ["nanogpt_loop", "preset", "muon_bf16", "muon_bf16_compile"]
    for r in record["recipes"]:
        (run,) = r["runs"]
        # stopped at the first validation <= the target: before the cap, at a validation step, and (train.py's
        # EarlyStopping, the loop's own check) with the loss there at or under the target
        assert run["reached"] and "failed" not in run, r["name"]
        assert run["val_loss_best"] <= anchor.SMOKE_TARGET, r["name"]
        assert 0 < run["step"] < anchor.SMOKE_STEPS and run["step"] % anchor.SMOKE_EVERY == 0, r["name"]
        assert run["seconds"] > 0 and r["median_s"] == run["seconds"], r["name"]
        assert r["ratio"] == pytest.approx(run["seconds"] / record["recipes"][0]["runs"][0]["seconds"]), r["name"]
    loop = record["recipes"][0]["runs"][0]
    assert (tmp_path / "runs").is_dir() and loop["whole_val_split_loss"] > 0
    muon = record["recipes"][2]["command"]
    assert "optim.name=muon" in muon and "'hardware=[cpu,bf16]'" in muon and "trainer.max_steps=200" in muon

    table = (tmp_path / "anchor.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [r["name"] for r in record["recipes"]]
    assert rows[0].split(" | ")[3] == "**1.000**"  # the anchor's ratio to itself
    assert "nanoGPT's train.py loop on this repository's GPT" in table and "the goal (<= 0.5x)" in table

    bench = json.loads((tmp_path / "bench-gpu" / "gpu.json").read_text())["runs"]
    assert [(r["name"], r["status"]) for r in bench] == [("shakespeare_char/gpu_bf16_muon", "completed")]
    assert recorded() == before  # a smoke run records nothing


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--rounds", "0"], "--rounds must be at least 1, got 0"),
        (
            ["--only", "adam"],
            "--only: unknown adam; the recipes are: nanogpt_loop, preset, muon_bf16, muon_bf16_compile",
        ),
        (["--bench-gpu", "gpu_bf32"], "--bench-gpu: unknown gpu_bf32; gpu.py's rows are: shakespeare_char/gpu,"),
        (
            ["--budget", "60"],
            "--budget: the matrix is estimated at 68 s, over 60 s: fewer --rounds, --only fewer recipes or "
            "fewer --bench-gpu rows",
        ),
    ],
)
def test_mistakes_are_one_line_before_any_run(tmp_path, arguments, message):
    args = ["--smoke", "--out", tmp_path, *arguments]
    if arguments[0] == "--budget":
        args += ["--bench-gpu", "shakespeare_char/gpu_bf16_muon"]
    proc = run_script(SCRIPT, *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_without_a_gpu_only_the_smoke_runs(tmp_path):
    proc = run_script(SCRIPT, "--out", tmp_path)
    assert proc.returncode == 2 and "no CUDA GPU is visible; --smoke runs the matrix on the CPU" in proc.stderr
