"""What the tests share, by theme: runs.py (the repository's paths, the tiny model, composing a config, and running
train.py and the commands as a user does: in the test's process, or in a process of their own where the process is
the point), translation.py, modular.py, wandb_records.py, layers.py, docs.py, bench_gpu.py, corpus.py; and
callbacks.py, the Lightning callbacks that real `train.py` runs load (`PYTHONPATH=tests`,
`+callbacks.NAME._target_=helpers.callbacks.KillAt`).

Kept empty on purpose: the train.py processes a test starts import this package, so it imports nothing (no pytest)."""
