"""What the tests share, by theme: commands/runs.py (the repository's paths, the tiny model, composing a config and
running train.py), translation.py, modular.py, wandb_records.py, layers.py, docs.py, bench_gpu.py, corpus.py; and
callbacks.py, the Lightning callbacks that real `train.py` runs load (`PYTHONPATH=tests`,
`+callbacks.NAME._target_=helpers.callbacks.KillAt`).

Kept empty on purpose: those train.py processes import this package, so it imports nothing (no pytest)."""
