"""What a run leaves on disk: its directory and lock (rundir), the one writer (atomic), checkpoints read back,
the code a run came from (origins), metrics.jsonl (history), and the readers of users' files (files)."""
