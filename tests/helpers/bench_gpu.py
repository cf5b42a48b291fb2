"""benchmarks/gpu.py (`make bench-gpu`), loaded as the module `bench_gpu`."""

import importlib.util
import sys

from helpers.runs import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu.py"
spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
bench = sys.modules["bench_gpu"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(bench)
