"""LightningModules, one per training objective: loss, metrics, optimizer, schedule and decoding."""
