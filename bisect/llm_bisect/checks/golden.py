"""The golden: reference outputs recorded from the good build, and the noise floor.

    {"version": 1, "commit": ..., "checks": {"logprobs": {...}, "eval": {...}},
     "calibration": {"runs": N, "restarts": R, "logprobs": {...}, "eval": {...}} | null}

Checks that compare with a golden (logprobs, eval) record their section from
the good build, then judge later builds against it with thresholds taken from
the config, else from calibration (the good build checked against itself),
else from defaults; `thresholds()` says which.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from ..redact import Scrub

if TYPE_CHECKING:
    from ..model import CheckResult
    from . import ChatEndpoint, Check

VERSION = 1


class GoldenCheck(Protocol):
    """A check that compares with a golden section it records itself."""

    name: str

    def record(self, endpoint: ChatEndpoint) -> dict[str, Any]:
        """This check's golden section, from the good build."""
        ...

    def use(self, section: Mapping[str, Any], calibration: Mapping[str, Any] | None) -> None:
        """Compare with this section from now on; thresholds from calibration when given."""
        ...

    def thresholds(self) -> dict[str, Any]:
        """The thresholds in force, and where each came from."""
        ...

    def noise(self, metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The calibration figures of this check, from its metrics over good-vs-good runs."""
        ...

    def run(self, endpoint: ChatEndpoint) -> CheckResult: ...


def golden_checks(checks: Sequence[Check]) -> list[GoldenCheck]:
    return [c for c in checks if hasattr(c, "record")]  # type: ignore[misc]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _LogprobsCase(_Doc):
    prompt: str
    content: str | None
    reasoning: str | None = None
    steps: list[tuple[str, float, dict[str, float]]]
    token_ids: list[int]
    prompt_token_ids: list[int]
    teacher: list[float | None]


class _LogprobsSection(_Doc):
    top_k: int
    max_tokens: int
    cases: list[_LogprobsCase] = Field(min_length=1)


class _EvalSection(_Doc):
    n: int = Field(gt=0)
    correct: int = Field(ge=0)
    accuracy: float = Field(ge=0, le=1)
    wilson95: tuple[float, float]
    invalid_share: float = Field(ge=0, le=1)
    null_share: float = Field(ge=0, le=1)
    answers: list[str | None]


class _Sections(_Doc):
    logprobs: _LogprobsSection | None = None
    eval: _EvalSection | None = None


class _LogprobsNoise(_Doc):
    max_abs_delta: float = Field(ge=0)
    teacher_mean_abs_delta: float = Field(ge=0)
    not_close: int = Field(ge=0)
    min_agreement: float = Field(ge=0, le=1)


class _EvalNoise(_Doc):
    accuracy_spread: float = Field(ge=0, le=1)
    accuracies: list[float]


class _Calibration(_Doc):
    runs: int = Field(gt=0)
    restarts: int = Field(ge=0)
    logprobs: _LogprobsNoise | None = None
    eval: _EvalNoise | None = None


class _Golden(_Doc):
    """The shape of golden.json, checked when it is read."""

    version: Literal[1]
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    checks: _Sections
    calibration: _Calibration | None = None


def load(path: Path) -> dict[str, Any]:
    """A golden file, checked whole: a wrong shape or type is one line naming the key."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"golden: no such file '{path}'") from None
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not JSON text"
        raise ConfigError(f"golden: cannot read '{path}' ({reason})") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ConfigError(f"golden: '{path}' is not an llm-bisect golden (version {VERSION})")
    try:
        _Golden.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"golden: '{path}' {where}: {err['msg']}") from None
    return data


def save(path: Path, data: Mapping[str, Any], scrub: Scrub | None = None) -> None:
    """Write a golden atomically; every text passes through `scrub` (secrets, long texts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    clean = (scrub or Scrub()).doc(dict(data))
    tmp.write_text(json.dumps(clean, indent=1) + "\n", encoding="utf-8")
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    tmp.replace(path)


def record(endpoint: ChatEndpoint, checks: Sequence[Check], commit: str) -> dict[str, Any]:
    """A new golden from one endpoint, for every golden check."""
    return {
        "version": VERSION,
        "commit": commit,
        "checks": {c.name: c.record(endpoint) for c in golden_checks(checks)},
        "calibration": None,
    }


def apply(golden: Mapping[str, Any], checks: Sequence[Check]) -> None:
    """Give each golden check its section; a missing section is an error naming the check."""
    for check in golden_checks(checks):
        section = golden["checks"].get(check.name)
        if section is None:
            raise ConfigError(
                f"golden: no '{check.name}' section (recorded with other checks; record it anew)"
            )
        calibration = golden.get("calibration") or {}
        check.use(section, calibration.get(check.name))


def thresholds(golden: Mapping[str, Any] | None, checks: Sequence[Check]) -> dict[str, Any]:
    """Every golden check's thresholds, and the calibration they came from, for the report."""
    calibration = (golden or {}).get("calibration") or {}
    return {
        "calibration": {k: calibration[k] for k in ("runs", "restarts") if k in calibration},
        **{c.name: c.thresholds() for c in golden_checks(checks)},
    }


class GoldenStore:
    """The golden of a run: loaded from `path`, or recorded there from the good end's probe."""

    def __init__(
        self,
        path: Path,
        checks: Sequence[Check],
        record_on: str | None = None,
        *,
        of: str | None = None,
        scrub: Scrub | None = None,
    ) -> None:
        """`of`: the commit the golden must have been recorded from (the good end)."""
        self.path = path
        self.checks = list(checks)
        self.record_on = record_on
        self.scrub = scrub or Scrub()
        self.data: dict[str, Any] | None = None
        if not golden_checks(self.checks):
            return
        if path.exists():
            self.data = load(path)
            if of is not None and self.data["commit"] != of:
                raise ConfigError(
                    f"golden: '{path}' was recorded from {self.data['commit'][:12]}, not from "
                    f"the good end {of[:12]}; record it with `llm-bisect golden CONFIG "
                    f"--candidate {of}`, or leave out `golden` to record one into --out"
                )
            apply(self.data, self.checks)
        elif record_on is None:
            names = ", ".join(c.name for c in golden_checks(self.checks))
            raise ConfigError(
                f"golden: {names} compare with a golden, and '{path}' does not exist; "
                "record one with `llm-bisect golden` or `llm-bisect calibrate`"
            )

    def ensure(self, endpoint: ChatEndpoint, commit: str) -> None:
        """Record the golden from this endpoint if it is the good end's and none exists yet."""
        if self.data is not None or not golden_checks(self.checks):
            return
        if commit != self.record_on:
            raise ConfigError(f"golden: none recorded yet, and {commit[:12]} is not the good end")
        self.data = record(endpoint, self.checks, commit)
        save(self.path, self.data, self.scrub)
        apply(self.data, self.checks)
