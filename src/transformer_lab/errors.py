"""Errors that are a user's to fix: reported as one clear message, never as a traceback."""


class UserError(Exception):
    """A mistake in the configuration, the inputs or the environment, with a message that says how to fix it."""


class ConfigError(UserError):
    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


class DataUnavailableError(UserError):
    pass


class NonFiniteLossError(UserError):
    """Training diverged: the loss became inf or nan."""
