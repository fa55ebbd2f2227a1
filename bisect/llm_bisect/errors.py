"""The one error tree of llm-bisect.

    LlmBisectError                 base: every error the tool raises on purpose
    ├── ConfigError                the config, a ref or a CLI argument is wrong (exit 2)
    │   ├── UnknownKind            no launcher, strategy, check or source has this tag (kinds)
    │   └── HarnessError           an eval harness (lm-eval) wrote what cannot be read
    ├── JournalError               DIR holds a journal that cannot be resumed
    │   └── DirInUse               another live llm-bisect holds DIR
    ├── LaunchError                a server could not be started or became unusable
    │   ├── ServerExited           the server process ended before it was ready
    │   ├── NotReady               the server did not get ready before its deadline
    │   ├── PortTaken              another process serves the server's port (a lost race)
    │   └── Unplaced               the cluster never ran it, or ended it (pending, node failure)
    ├── EndpointError              a request to a running server failed or its reply did not fit
    │   ├── ReplyTooLarge          a reply was longer than the cap (itself evidence)
    │   ├── RequestRejected        the server refused the request (HTTP 4xx)
    │   └── ServerFault            the server answered 5xx, reset or dropped the connection
    ├── SearchError                the verdicts contradict the search (e.g. good end is bad)
    └── LocalizeError              a build could not be instrumented or read (localize)

Adapters translate library errors at their boundary (`raise X(...) from exc`);
the CLI maps this tree to exit codes in one place.
"""

from __future__ import annotations


class LlmBisectError(Exception):
    """Base of every error llm-bisect raises on purpose."""


class ConfigError(LlmBisectError):
    """The config, a ref or a command-line argument is invalid."""


class BrokenGoodEnd(LlmBisectError):
    """The good end's own answers are degenerate or empty: a golden from it judges nothing."""


class UnknownKind(ConfigError):
    """No kind of this seam is registered under the tag (kinds.py): never a silent default."""


class HarnessError(ConfigError):
    """An eval harness (lm-eval) wrote output that cannot be read: its version or install,
    not the build under test (every build would read the same)."""


class JournalError(LlmBisectError):
    """The output folder holds a journal that cannot be resumed."""


class DirInUse(JournalError):
    """Another live llm-bisect process holds the output folder."""


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


class PortTaken(LaunchError):
    """Another process serves the port the server was given: it lost the race for it (a
    port is free when picked, not when the server binds it), and is not the one to check."""


class Unplaced(LaunchError):
    """The scheduler never ran the server (pending past its deadline) or the cluster ended it
    (node failure, preemption) on every try: the node's, never the build's failure to start."""


class EndpointError(LlmBisectError):
    """A request to a running server failed (connection, HTTP status, bad JSON)."""


class ReplyTooLarge(EndpointError):
    """A reply was longer than the cap on the bytes read per reply (`server.max_reply_mb`)."""

    def __init__(self, what: str, cap: int, declared: int | None) -> None:
        said = (
            f"a reply of {declared} bytes is over the cap of {cap} bytes"
            if declared is not None
            else f"the reply ran past the cap of {cap} bytes"
        )
        super().__init__(f"{what}: {said} (server.max_reply_mb)")
        self.cap = cap


class RequestRejected(EndpointError):
    """The server refused a request as invalid (HTTP 4xx), e.g. a budget past its context."""


class ServerFault(EndpointError):
    """The server failed a request: HTTP 5xx, a reset or dropped connection (crash-like)."""


class SearchError(LlmBisectError):
    """The verdicts contradict the search, e.g. the good end tests bad."""


class LocalizeError(LlmBisectError):
    """A localisation probe could not run: the server did not start with the worker
    extension, or has no /collective_rpc (not vLLM, or no VLLM_SERVER_DEV_MODE)."""
