"""A text corpus of more than 1 GB through data=text (issue "Real corpora", item 6): memory, preparation
throughput, a second run's start, and training speed against the in-memory Shakespeare path.

    python benchmarks/corpus.py            # about an hour on 2 cores; writes benchmarks/corpus.{json,md}
    python benchmarks/corpus.py --gb 0.05  # the same steps on 50 MB (minutes; printed, not recorded)

The corpus is generated here: tiny Shakespeare's speeches (its blank-line-separated documents), shuffled
anew for each of 4 files until they hold --gb GB. Every measurement runs in a fresh subprocess, whose
peak RSS is read from wait4(); speeds are compared interleaved (A B A B A B) in one sitting, median of
the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT / "data" / "shakespeare" / "input.txt"
MODEL = ["model=gpt", "model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.dropout=0", "model.bias=false"]
QUIET = ["logger=none", "trainer.enable_progress_bar=false", "callbacks.last_checkpoint.every_n_train_steps=100000"]


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    )
    return head.strip() + ("-dirty" if dirty.stdout.strip() else "")


def cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def run(args: list[str], env: dict | None = None) -> tuple[str, float, float]:
    """(output, seconds, peak RSS in MB) of a subprocess."""
    env = dict(env or {})
    if "PYTHONPATH" in env and os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    started = time.perf_counter()
    process = subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "2", **env},
    )
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if status != 0:
        sys.exit(f"failed ({status}): {' '.join(args)}\n{output[-3000:]}")
    return output, seconds, usage.ru_maxrss / 1024


def generate(folder: Path, total_bytes: int, files: int) -> None:
    if folder.is_dir() and sum(f.stat().st_size for f in folder.glob("*.txt")) >= total_bytes:
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    speeches = [s for s in SHAKESPEARE.read_text().split("\n\n") if s.strip()]
    for k in range(files):
        rng, written = random.Random(k), 0
        with open(folder / f"part{k}.txt", "w") as f:
            while written < total_bytes / files:
                rng.shuffle(speeches)
                block = "\n\n".join(speeches) + "\n\n"
                f.write(block)
                written += len(block.encode())


PREPARE = """
import json, sys, time
from transformer_lab.data.configs import TextConfig
from transformer_lab.data.corpus import prepare
import transformer_lab.data.corpus.preparation as preparation
encoded = []
original = preparation.encode_source
preparation.encode_source = lambda c, s, *a: encoded.append(s.label) or original(c, s, *a)
started = time.perf_counter()
tokenizer, shards = prepare(TextConfig(**json.loads(sys.argv[1])))
print("RESULT", json.dumps({"seconds": time.perf_counter() - started, "encoded": len(encoded),
      "tokens": sum(s.train_tokens + s.val_tokens for s in shards), "vocab": tokenizer.vocab_size,
      "tokenizer": tokenizer.to_json() if len(sys.argv) > 2 else None}))
"""

ENCODE_BATCH = """
import json, sys, time
from transformer_lab.data.configs import TextConfig
from transformer_lab.data.corpus import FileHashes, sources
from transformer_lab.data.tokenizers import pretrained
config = TextConfig(**json.loads(sys.argv[1]))
tokenizer = pretrained(config.tokenizer, config.end_of_text).tokenizer
encode = getattr(tokenizer, sys.argv[3])
seconds = 0.0
for source in sources(config, FileHashes(__import__("pathlib").Path(sys.argv[2]))):
    for documents, _ in source.batches():
        started = time.perf_counter()
        encode(documents, add_special_tokens=False)
        seconds += time.perf_counter() - started
print("RESULT", json.dumps({"seconds": seconds}))
"""


def result(output: str) -> dict:
    return json.loads(next(line for line in output.splitlines() if line.startswith("RESULT "))[7:])


def prepare(settings: dict, keep_tokenizer: bool = False) -> dict:
    output, seconds, rss = run(
        [sys.executable, "-c", PREPARE, json.dumps(settings), *(["t"] if keep_tokenizer else [])]
    )
    return {**result(output), "wall_s": seconds, "peak_rss_mb": rss}


def train(*overrides: str) -> tuple[str, float, float]:
    return run([sys.executable, "train.py", *overrides])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=1.05, help="corpus size")
    parser.add_argument("--work", default="/tmp/transformer-lab-corpus-bench", help="corpus and caches go here")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--speed-pairs", type=int, default=5, help="interleaved pairs of (d) steps/s")
    parser.add_argument(
        "--reuse-learned",
        action="store_true",
        help="keep the BPE learned by an earlier run in --work (its cache, tokenizer.json, learned.json)",
    )
    args = parser.parse_args()
    work = Path(args.work)
    big, small = work / "corpus", work / "small"
    generate(big, int(args.gb * 1e9), 4)
    generate(small, 10_000_000, 1)
    size = sum(f.stat().st_size for f in big.glob("*.txt"))
    out: dict = {"cpu": cpu_model(), "cores": os.cpu_count(), "corpus_bytes": size, "date": time.strftime("%Y-%m-%d")}
    out["code"] = commit()
    print(f"corpus: {size / 1e9:.2f} GB in {big}; cpu {out['cpu']}", flush=True)

    # (a) preparation, learning a BPE tokenizer from the training documents and encoding them
    common = {"path": str(big), "val_fraction": 0.001}
    tokenizer_file = work / "tokenizer.json"
    for cache in ("cache_tok", "cache_small", "cache_char", *(() if args.reuse_learned else ("cache_bpe",))):
        shutil.rmtree(work / cache, ignore_errors=True)
    if args.reuse_learned:
        learned = json.loads((work / "learned.json").read_text())
    else:
        bpe = {**common, "tokenizer": "bpe", "vocab_size": 4096, "cache_dir": str(work / "cache_bpe")}
        learned = prepare(bpe, keep_tokenizer=True)
        tokenizer_file.write_text(json.loads(learned.pop("tokenizer"))["tokenizer"])
        (work / "learned.json").write_text(json.dumps({**learned, "code": commit()}))
    print(
        f"prepare (learn bpe + encode): {learned['wall_s']:.0f} s, peak RSS {learned['peak_rss_mb']:.0f} MB", flush=True
    )
    out["prepare_learning_bpe"] = learned

    # (b) the pipeline against the tokenizer's own encode_batch (and encode_batch_fast) on the same documents,
    # interleaved
    pairs = []
    tok = {**common, "tokenizer": str(tokenizer_file)}
    for _ in range(args.pairs):
        shutil.rmtree(work / "cache_tok", ignore_errors=True)
        a = prepare({**tok, "cache_dir": str(work / "cache_tok")})
        b = result(run([sys.executable, "-c", ENCODE_BATCH, json.dumps(tok), str(work / "hashes"), "encode_batch"])[0])
        fast = run([sys.executable, "-c", ENCODE_BATCH, json.dumps(tok), str(work / "hashes"), "encode_batch_fast"])[0]
        b_fast = result(fast)
        # prepare()'s seconds (files hashed, read, split, encoded, written) against encode_batch's alone
        pairs.append(
            {
                "pipeline_s": a["seconds"],
                "process_s": a["wall_s"],
                "pipeline_rss_mb": a["peak_rss_mb"],
                "encode_batch_s": b["seconds"],
                "encode_batch_fast_s": b_fast["seconds"],
            }
        )
        print(
            f"pipeline {a['seconds']:.1f} s (RSS {a['peak_rss_mb']:.0f} MB) vs encode_batch {b['seconds']:.1f} s, "
            f"encode_batch_fast {b_fast['seconds']:.1f} s",
            flush=True,
        )
    ratios = [p["encode_batch_s"] / p["pipeline_s"] for p in pairs]
    out["throughput"] = {
        "pairs": pairs,
        "pipeline_mb_s": statistics.median(size / 1e6 / p["pipeline_s"] for p in pairs),
        "encode_batch_mb_s": statistics.median(size / 1e6 / p["encode_batch_s"] for p in pairs),
        "ratio_median": statistics.median(ratios),
        "encode_batch_fast_mb_s": statistics.median(size / 1e6 / p["encode_batch_fast_s"] for p in pairs),
        "ratio_to_fast_median": statistics.median(p["encode_batch_fast_s"] / p["pipeline_s"] for p in pairs),
    }

    # (c) a second run: nothing encoded again; seconds to the first training step, 1 GB vs 10 MB
    warm = prepare({**common, "tokenizer": "bpe", "vocab_size": 4096, "cache_dir": str(work / "cache_bpe")})
    first = [
        "+callbacks.first_step._target_=first_step.FirstStep",
        *QUIET,
        *MODEL,
        "data=text",
        "data.val_fraction=0.001",
    ]
    starts = {}
    for name, path, cache in (("1gb", big, "cache_bpe"), ("10mb", small, "cache_small")):
        tokenizer = "bpe" if name == "1gb" else str(tokenizer_file)
        overrides = [*first, f"data.path={path}", f"data.tokenizer={tokenizer}", f"data.cache_dir={work / cache}"]
        if name == "10mb":
            run([sys.executable, "train.py", *overrides], env={"PYTHONPATH": str(ROOT / "benchmarks")})  # its cache
        output, _, _ = run([sys.executable, "train.py", *overrides], env={"PYTHONPATH": str(ROOT / "benchmarks")})
        starts[name] = float(output.split("first training step after ")[1].split()[0])
    out["second_run"] = {"prepare_s": warm["seconds"], "encoded": warm["encoded"], "first_step_s": starts}
    print(
        f"second run: prepare {warm['seconds']:.1f} s, {warm['encoded']} file(s) encoded; first step {starts}",
        flush=True,
    )

    # (a) training memory: the same model on the 1 GB and the 10 MB corpus (same tokenizer)
    memory = {}
    steps = ["trainer.max_steps=300", "trainer.val_check_interval=100", "trainer.limit_val_batches=20"]
    steps += ["data.block_size=64", "data.batch_size=12"]  # shakespeare_char_cpu's
    for name, path, cache in (("1gb", big, "cache_bpe"), ("10mb", small, "cache_small")):
        tokenizer = "bpe" if name == "1gb" else str(tokenizer_file)
        _, _, rss = train(
            *QUIET, *MODEL, *steps, "data=text", f"data.path={path}", f"data.tokenizer={tokenizer}",
            "data.val_fraction=0.001", f"data.cache_dir={work / cache}", f"hydra.run.dir={work / 'runs' / name}",
        )  # fmt: skip
        memory[name] = rss
    out["training_peak_rss_mb"] = {**memory, "ratio": memory["1gb"] / memory["10mb"]}
    print(f"training peak RSS: {memory}", flush=True)

    # (d) steps/s: the 1 GB corpus (characters, from disk) against tiny Shakespeare (in memory), same model
    # and batch as the shakespeare_char_cpu preset, A B A B A B
    prepare({**common, "tokenizer": "char", "cache_dir": str(work / "cache_char")})
    # The token files are read once first: a run's random windows then come from the page cache, as they do
    # in any run after the first (cold, each window is a disk read: 0.84x over 400 steps at 9195089).
    for shard in (work / "cache_char").rglob("*.bin"):
        with shard.open("rb") as f:
            while f.read(1 << 24):
                pass
    speed = ["experiment=shakespeare_char_cpu", *QUIET, "trainer.max_steps=1000", "trainer.limit_val_batches=0"]
    disk = ["data=text", f"data.path={big}", "data.tokenizer=char", "data.val_fraction=0.001",
            f"data.cache_dir={work / 'cache_char'}", "data.block_size=64", "data.batch_size=12"]  # fmt: skip
    rows = []
    for i in range(args.speed_pairs):
        rates = {}
        for name, extra in (("memory", []), ("disk", disk)):
            run_dir = work / "runs" / f"speed_{name}_{i}"
            train(*speed, *extra, f"hydra.run.dir={run_dir}")
            rates[name] = json.loads((run_dir / "summary.json").read_text())["tokens_per_sec"]
        rows.append(rates)
        print(f"steps/s ratio disk/memory: {rates['disk'] / rates['memory']:.3f} ({rates})", flush=True)
    out["steps_per_s"] = {"pairs": rows, "ratio_median": statistics.median(r["disk"] / r["memory"] for r in rows)}

    if args.gb < 1:  # the figures are of a corpus of 1 GB or more
        print(json.dumps(out, indent=2))
        return
    name = "corpus"
    (ROOT / "benchmarks" / f"{name}.json").write_text(json.dumps(out, indent=2) + "\n")
    t, m = out["throughput"], out["training_peak_rss_mb"]
    (ROOT / "benchmarks" / f"{name}.md").write_text(
        textwrap.dedent(f"""\
        # A {size / 1e9:.2f} GB corpus through data=text

        `python benchmarks/corpus.py` on {out["date"]} (code {out["code"]}), CPU `{out["cpu"]}` ({out["cores"]} cores);
        figures in {name}.json. The corpus: tiny Shakespeare's speeches, shuffled anew into 4 files.

        | | measured | target |
        |---|---|---|
        | preparation peak RSS, learning BPE (4096) and encoding (code {learned["code"]}) | {learned["peak_rss_mb"]:.0f} MB ({learned["wall_s"]:.0f} s) | ≤ 1 GB |
        | preparation peak RSS, encoding with a tokenizer.json | {max(p["pipeline_rss_mb"] for p in t["pairs"]):.0f} MB | ≤ 1 GB |
        | training peak RSS, 1 GB / 10 MB corpus (same model) | {m["1gb"]:.0f} / {m["10mb"]:.0f} MB = {m["ratio"]:.3f} | within 10% |
        | preparation throughput / encode_batch's, median of {len(t["pairs"])} triples | {t["pipeline_mb_s"]:.2f} / {t["encode_batch_mb_s"]:.2f} MB/s = {t["ratio_median"]:.3f} | ≥ 0.9 |
        | preparation throughput / encode_batch_fast's (no offsets, what it calls) | {t["pipeline_mb_s"]:.2f} / {t["encode_batch_fast_mb_s"]:.2f} MB/s = {t["ratio_to_fast_median"]:.3f} | |
        | second run: files encoded again; prepare | {out["second_run"]["encoded"]}; {out["second_run"]["prepare_s"]:.1f} s | 0 |
        | seconds to the first step, 1 GB / 10 MB corpus | {starts["1gb"]:.1f} / {starts["10mb"]:.1f} s | |
        | steps/s from disk / in memory, median of {len(rows)} pairs | {out["steps_per_s"]["ratio_median"]:.3f} | within 5% |
        """)
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
