"""`hydra/launcher=parallel`: a multirun's jobs N at a time on this machine, each a process of its own (Hydra finds
launchers in `hydra_plugins`)."""
