"""Errors that are a user's to fix: reported as one clear message, never as a traceback."""

import sys
from contextlib import contextmanager


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


@contextmanager
def exit_on_user_error():
    """Inside it, a UserError becomes `error: MESSAGE` on stderr and exit code 2."""
    try:
        yield
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
