"""Datasets: each a `base.DataSource` giving raw splits (not batches: batching/ makes those, as a
LightningDataModule), and the download + checksum helper they share."""
