"""LightningDataModules, one per dataset, and the download + checksum helper they share."""
