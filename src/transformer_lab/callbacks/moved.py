"""A run directory moved or copied elsewhere resumes as it would have in place.

Lightning's ModelCheckpoint restores its record of best.ckpt and last.ckpt only where its `dirpath` is the one
the checkpoint was written from; after a move it forgets them, and saving last.ckpt again then found the
file there and wrote `last-v1.ckpt` beside it (a later resume read the stale last.ckpt). Before the callbacks
load their states, this rewrites the paths their states hold from the old run directory to this one, where
the files are there under the same names. (The keys are ModelCheckpoint's `state_dict`: tests/unit/test_upstream.py
fails if they change.)"""

from __future__ import annotations

from pathlib import Path

import lightning as L

PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


class MovedRun(L.Callback):
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir).absolute()

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        for state in (checkpoint.get("callbacks") or {}).values():
            old = state.get("dirpath") if isinstance(state, dict) else None
            if old and Path(old).parent != self.run_dir:
                relocate(state, old, str(self.run_dir / Path(old).name))


def relocate(state: dict, old: str, new: str) -> None:
    """A ModelCheckpoint's state with its paths under `old` moved under `new`, where the files are there."""

    def moved(path):
        return new + path[len(old) :] if isinstance(path, str) and path.startswith(old) else path

    if not all(Path(moved(state[key])).is_file() for key in PATH_KEYS if state.get(key)):
        return  # another run's checkpoint resumed here: Lightning's own handling (it starts afresh)
    state.update({key: moved(state.get(key)) for key in PATH_KEYS}, dirpath=new)
    if isinstance(state.get("best_k_models"), dict):
        state["best_k_models"] = {moved(k): v for k, v in state["best_k_models"].items()}
