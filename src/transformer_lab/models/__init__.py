"""Plain torch.nn.Modules, one file per architecture (their settings in configs.py, which needs no torch).
Nothing here imports Lightning or Hydra."""
