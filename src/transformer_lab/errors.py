"""Errors that are a user's to fix: reported as one clear message, never as a traceback."""

import sys
from contextlib import contextmanager


class UserError(Exception):
    """A mistake in the configuration, the inputs or the environment, with a message that says how to fix it."""


class ConfigError(UserError, ValueError):
    """A setting's value is wrong: `key` names it (as on the command line), `message` says what is valid."""

    def __init__(self, key: str, message: str):
        self.key, self.message = key, message
        super().__init__(f"{key}: {message}")


def first_line(error: BaseException) -> str:
    """An exception's message in one line (its first), or its type's name where it has none (an EOFError)."""
    text = str(error).strip()
    return text.splitlines()[0].strip() if text else type(error).__name__


def require(ok: bool, key: str, message: str) -> None:
    """A ConfigError naming `key` unless `ok`."""
    if not ok:
        raise ConfigError(key, message)


@contextmanager
def keyed(key: str, catch: type[Exception] | tuple[type[Exception], ...] = ValueError):
    """What `catch` raises inside (a tokenizer refusing a text, a checkpoint refused) as one line naming `key`."""
    try:
        yield
    except catch as e:
        raise ConfigError(key, str(e)) from None


@contextmanager
def under(section: str):
    """A section's dataclass refusing one of its fields, named as the config names it (`model.n_embd`)."""
    try:
        yield
    except ConfigError as e:
        raise ConfigError(e.key if e.key.startswith(f"{section}.") else f"{section}.{e.key}", e.message) from None


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
