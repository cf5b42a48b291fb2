"""`hydra/sweeper=wandb`: a W&B sweep spec driving Hydra jobs (Hydra finds sweepers in `hydra_plugins`)."""
