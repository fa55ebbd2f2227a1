"""The one error tree of llm-bisect.

    LlmBisectError                 base: every error the tool raises on purpose
    ├── ConfigError                the config, a ref or a CLI argument is wrong (exit 2)
    ├── JournalError               DIR holds a journal that cannot be resumed
    ├── LaunchError                a server could not be started or became unusable
    │   ├── ServerExited           the server process ended before it was ready
    │   └── NotReady               the server did not get ready before its deadline
    ├── EndpointError              a request to a running server failed
    └── SearchError                the verdicts contradict the search (e.g. good end is bad)

Adapters translate library errors at their boundary (`raise X(...) from exc`);
the CLI maps this tree to exit codes in one place.
"""

from __future__ import annotations


class LlmBisectError(Exception):
    """Base of every error llm-bisect raises on purpose."""


class ConfigError(LlmBisectError):
    """The config, a ref or a command-line argument is invalid."""


class JournalError(LlmBisectError):
    """The output folder holds a journal that cannot be resumed."""


class LaunchError(LlmBisectError):
    """A server could not be started, or stopped being usable."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class ServerExited(LaunchError):
    """The server process ended before it became ready."""

    def __init__(self, message: str, returncode: int | None, log_tail: str = "") -> None:
        super().__init__(message, log_tail)
        self.returncode = returncode


class NotReady(LaunchError):
    """The server did not become ready before its deadline."""


class EndpointError(LlmBisectError):
    """A request to a running server failed (connection, HTTP status, bad JSON)."""


class SearchError(LlmBisectError):
    """The verdicts contradict the search, e.g. the good end tests bad."""
