"""Datasets: each a `base.DataModule` giving raw splits (not batches: batching/ makes those, as a
LightningDataModule), and the download + checksum helper they share."""
