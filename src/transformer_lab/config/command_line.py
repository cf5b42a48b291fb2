"""Hydra's command-line overrides as text (`key=value`, `+key=value`, `~key`): light enough for the train
command to read before anything heavy is imported."""


def override_key(override: str) -> str:
    """The key an override sets, without its `+` (add) or `~` (delete) prefix."""
    return override.split("=", 1)[0].lstrip("+~")
