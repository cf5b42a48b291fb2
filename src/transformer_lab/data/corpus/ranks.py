"""Which of several processes prepares the corpus cache, and how the others wait for it.

Every process of a run builds its data before Lightning's Trainer exists (run.build.build: the model's sizes
come from the data), so before any process group. Where the processes start together (torchrun; srun's tasks
under SLURM; any launcher that sets torch's env:// variables RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT, as hydra/launcher=slurm_local does), local rank 0 of each node prepares the cache and the node's
other processes wait for it on a torch.distributed TCPStore, then read the cache. The store is the one the
run's process group opens later, at MASTER_ADDR:MASTER_PORT: torchrun's agent hosts it, else global rank 0
hosts it as a multi-tenant TCPStore, which init_process_group (Lightning's DDP setup) then shares rather than
opening the port again (as torch.distributed.rendezvous does, `_create_c10d_store`). No process group is made
here, so Lightning sets up its own as it would (backend, timeout, device). Rank 0 waits for nobody: it says
it is done, or why it failed, and goes on.

Lightning's own DDP launcher (strategy=ddp) starts the other processes in trainer.fit, after this process
prepared the cache, so they find it complete. It sets LOCAL_RANK, WORLD_SIZE and MASTER_ADDR/PORT but not
RANK, so its processes are not taken for processes started together; nor are processes a user starts with
LOCAL_RANK alone, which cannot be told from them. A process not started together prepares what it finds
missing itself (every file is written atomically: two doing so at once cost time, not correctness).
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch.distributed as dist

from transformer_lab.errors import DataUnavailableError, first_line

log = logging.getLogger(__name__)

WAIT_SECONDS = 3600  # how long a process of local rank > 0 waits for local rank 0 to prepare the cache
T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process among the processes started together."""

    rank: int
    local_rank: int
    node: str  # its node, among the run's nodes
    world_size: int
    address: str  # MASTER_ADDR:MASTER_PORT, where the run's store is
    port: int


def started_together() -> Ranks | None:
    """This process's ranks where it is one of several processes started together (in the order Lightning
    picks a cluster environment: TorchElasticEnvironment, SLURMEnvironment, else the variables of env://);
    None for a process alone or one that Lightning's launcher started."""
    env = os.environ
    if not dist.is_available():
        return None
    if dist.is_torchelastic_launched():  # torchrun
        ranks = (env["RANK"], env["LOCAL_RANK"], env.get("GROUP_RANK", "0"), env["WORLD_SIZE"])
        address, port = env["MASTER_ADDR"], env["MASTER_PORT"]
    elif "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive"):  # srun's tasks
        from lightning.fabric.plugins.environments import SLURMEnvironment

        try:
            slurm = SLURMEnvironment()
        except RuntimeError:  # SLURM variables Lightning refuses: the Trainer says so, in its words
            return None
        ranks = (slurm.global_rank(), slurm.local_rank(), slurm.node_rank(), slurm.world_size())
        address, port = slurm.main_address, slurm.main_port  # (set MASTER_ADDR/PORT, as Lightning does later)
    elif all(env.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")):
        node = env.get("GROUP_RANK") or env.get("NODE_RANK") or socket.gethostname()
        ranks = (env["RANK"], env["LOCAL_RANK"], node, env["WORLD_SIZE"])
        address, port = env["MASTER_ADDR"], env["MASTER_PORT"]
    else:
        return None
    rank, local_rank, node, world_size = ranks
    found = Ranks(int(rank), int(local_rank), str(node), int(world_size), address, int(port))
    return found if found.world_size > 1 else None


_stores: dict[tuple, dist.TCPStore] = {}  # kept while the process lives: global rank 0's serves the others
_rounds: collections.Counter = collections.Counter()  # preparations so far, by rank (a process is one rank)


def _store(ranks: Ranks) -> dist.Store:
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)  # (torch's own test, rendezvous.py)
    host = ranks.rank == 0 and not agent
    where = (ranks.address, ranks.port, host)
    if where not in _stores:
        try:
            _stores[where] = dist.TCPStore(
                ranks.address,
                ranks.port,
                is_master=host,
                timeout=timedelta(seconds=WAIT_SECONDS),  # also how long a client tries to reach the host
                wait_for_workers=False,
                multi_tenant=True,
                use_libuv=os.environ.get("USE_LIBUV", "1") == "1",  # (what init_process_group's store will use)
            )
        except (dist.DistError, RuntimeError) as e:
            raise DataUnavailableError(
                f"data: rank {ranks.rank} cannot reach the run's store at {ranks.address}:{ranks.port} to "
                f"coordinate the corpus cache's preparation ({first_line(e)})"
            ) from None
    return dist.PrefixStore("transformer_lab/corpus_cache", _stores[where])


def _wait(store: dist.Store, key: str, seconds: float) -> bytes:
    """The key's value once it is set. store.wait() blocks in C++, where no signal handler runs (Ctrl-C would
    wait it out): it runs in a helper thread, and the main thread's join() is interrupted by a signal."""
    got: dict = {}

    def wait() -> None:
        try:
            store.wait([key], timedelta(seconds=seconds))
            got["value"] = store.get(key)
        except Exception as e:  # noqa: BLE001  (given to the main thread)
            got["error"] = e

    waiter = threading.Thread(target=wait, name="corpus-cache-wait", daemon=True)
    waiter.start()
    waiter.join()
    if "error" in got:
        raise got["error"]
    return got["value"]


def local_rank_zero_first(ranks: Ranks, prepare: Callable[[bool], T], seconds: float = WAIT_SECONDS) -> T:
    """prepare(True) on local rank 0; on the node's other processes prepare(False) (read, never write) once
    local rank 0's is done, or its one-line error where it failed."""
    store = _store(ranks)
    key = f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{_rounds[ranks.rank]}/node-{ranks.node}"
    _rounds[ranks.rank] += 1
    if ranks.local_rank != 0:
        log.info("data: local rank %d waits for local rank 0 to prepare the corpus cache", ranks.local_rank)
        try:
            said = _wait(store, key, seconds).decode()
        except dist.DistError as e:  # waited in vain, or the store went away (rank 0 ended)
            waited = isinstance(e, dist.DistStoreError) and "timeout" in str(e)
            raise DataUnavailableError(
                f"data: waited {seconds:.0f} s for local rank 0 to prepare the corpus cache"
                if waited
                else f"data: local rank {ranks.local_rank} lost local rank 0 while it prepared the corpus cache "
                f"({first_line(e)})"
            ) from None
        if said != "done":
            raise DataUnavailableError(
                f"data: local rank 0 could not prepare the corpus cache: {said.removeprefix('failed: ')}"
            )
        return prepare(False)
    try:
        result = prepare(True)
    except BaseException as e:
        try:  # the processes waiting fail now, with its reason
            store.set(key, f"failed: {first_line(e)}")
        except Exception:  # noqa: BLE001, S110  (its own error is the one to raise)
            pass
        raise
    store.set(key, "done")
    return result
