"""Processes started together (data/corpus/ranks.py): local rank 0 prepares the corpus cache, the others wait
for it on the run's torch.distributed store and read what it wrote; the run's process group opens afterwards
on the same address, as Lightning's DDP setup opens it. That ranks.py never polls the file system is
tests/unit/test_corpus_ranks.py; two ranks in threads, tests/unit/test_corpus.py."""

import json
import os
import subprocess
import sys

import pytest

from helpers.corpus import free_port

# One process of the run: rank 0 encodes slowly (it waits until rank 1 is in prepare() too, then a second
# more), so a rank 1 that did not wait for it would find the cache incomplete.
RANK = """
import json, logging, os, sys, time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist

import transformer_lab.data.corpus.preparation as preparation
from transformer_lab.data.configs import TextConfig

logging.basicConfig(level=logging.INFO)
settings, out = json.loads(sys.argv[1]), Path(sys.argv[2])
rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
record = {"encoded": []}
encode = preparation.encode_source


def slow_encode(config, source, *rest):
    while not (out / "rank1-preparing").exists():
        time.sleep(0.05)
    time.sleep(1.0)
    shard = encode(config, source, *rest)
    record["encoded"].append(source.label)
    record["encoded_at"] = time.time()
    return shard


preparation.encode_source = slow_encode
if rank == 1:
    (out / "rank1-preparing").touch()
record["started"] = time.time()
tokenizer, shards = preparation.prepare(TextConfig(**settings))
record.update(returned=time.time(), shards=[asdict(s) for s in shards], tokenizer=tokenizer.to_json())
dist.init_process_group("gloo", rank=rank, world_size=world_size)  # (Lightning's _init_dist_connection's call)
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
record["all_reduce"] = total.item()
dist.destroy_process_group()
(out / f"rank{rank}.json").write_text(json.dumps(record))
"""


@pytest.mark.parametrize("launcher", ["torchrun", "env"])
def test_rank_one_waits_for_rank_zero_and_reads_its_cache(tmp_path, launcher):
    """torchrun (its agent hosts the store) and processes given torch's env:// variables (hydra/launcher=
    slurm_local's way: rank 0 hosts the store, and init_process_group then shares its port)."""
    (tmp_path / "docs.txt").write_text("\n\n".join(f"document {i}: the cat sat on the mat" for i in range(50)))
    settings = {
        "path": str(tmp_path / "docs.txt"),
        "tokenizer": "char",
        "cache_dir": str(tmp_path / "cache"),
        "block_size": 8,
        "val_fraction": 0.2,
    }
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    args = [str(script), json.dumps(settings), str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_"))}
    env = {**env, "OMP_NUM_THREADS": "1"}
    if launcher == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        output = result.stdout + result.stderr
    else:
        port = str(free_port())
        processes = [
            subprocess.Popen(
                [sys.executable, *args],
                env={
                    **env,
                    "RANK": r,
                    "LOCAL_RANK": r,
                    "WORLD_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                },
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for r in ("0", "1")
        ]
        outputs = [p.communicate(timeout=120)[0] for p in processes]
        assert [p.returncode for p in processes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
        output = "".join(outputs)
    zero, one = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert zero["encoded"] == [settings["path"]] and one["encoded"] == []  # rank 0 alone wrote the cache
    assert one["started"] < zero["encoded_at"] <= one["returned"]  # rank 1 was there first, and waited
    assert "local rank 1 waits for local rank 0 to prepare the corpus cache" in output
    assert output.count("learned the char tokenizer") == 1
    assert one["shards"] == zero["shards"] and one["tokenizer"] == zero["tokenizer"]
    assert zero["all_reduce"] == one["all_reduce"] == 3.0  # the run's process group opens as before
