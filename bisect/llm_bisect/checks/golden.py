"""The golden: reference outputs recorded from the good build, and the noise floor.

A typed document (`Golden`, JSON Schema from `schema()`), one section per check:

    {"version": 2, "commit": ..., "checks": {"canary": {...}, "expect": {...},
     "logprobs": {...}, "eval": {...}}, "calibration": {"runs": N, ...} | null}

Every check records its section from the good build: the answers, the
`finish_reason` and the token budget each prompt finished in. Later builds are
judged against it (it is passed to each check's `run`): a rule counts only
where the good build passed it, and with the budget the good build needed.
Checks with thresholds (logprobs, eval) take them from the config, else from
calibration (the good build checked against itself), else from defaults.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from ..files import read_capped
from ..redact import Scrub

if TYPE_CHECKING:
    from . import ChatEndpoint, Check

VERSION = 2
MAX_GOLDEN_BYTES = 256 * 2**20
"""The most bytes read of a golden file (every text in one is cut to 20,000 characters)."""


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Answer(_Doc):
    """One prompt's answer from the good build, and the budget it was given."""

    prompt: str
    content: str | None
    reasoning: str | None = None
    finish_reason: str | None
    max_tokens: int = Field(gt=0)
    """The budget the answer finished in (or was cut at, at the cap)."""

    @property
    def cut(self) -> bool:
        return self.finish_reason == "length"


class CanarySection(_Doc):
    cases: list[Answer] = Field(min_length=1)


class ExpectAnswer(Answer):
    match: str
    matched: bool


class ExpectSection(_Doc):
    cases: list[ExpectAnswer] = Field(min_length=1)


class LogprobsCase(_Doc):
    prompt: str
    content: str | None
    reasoning: str | None = None
    steps: list[tuple[str, float, dict[str, float]]]
    token_ids: list[int]
    prompt_token_ids: list[int]
    teacher: list[float | None]


class LogprobsSection(_Doc):
    top_k: int
    max_tokens: int
    cases: list[LogprobsCase] = Field(min_length=1)


class EvalSection(_Doc):
    n: int = Field(gt=0)
    correct: int = Field(ge=0)
    accuracy: float = Field(ge=0, le=1)
    wilson95: tuple[float, float]
    invalid_share: float = Field(ge=0, le=1)
    null_share: float = Field(ge=0, le=1)
    cut_share: float = Field(default=0.0, ge=0, le=1)
    answers: list[str | None]
    budgets: list[int] = Field(default_factory=list)
    """Per problem, the budget its answer finished in."""


class Sections(_Doc):
    canary: CanarySection | None = None
    expect: ExpectSection | None = None
    logprobs: LogprobsSection | None = None
    eval: EvalSection | None = None


class LogprobsNoise(_Doc):
    max_abs_delta: float = Field(ge=0)
    teacher_mean_abs_delta: float = Field(ge=0)
    topk_max_abs_delta: float = Field(default=0.0, ge=0)
    not_close: int = Field(ge=0)
    min_agreement: float = Field(ge=0, le=1)


class EvalNoise(_Doc):
    accuracy_spread: float = Field(ge=0, le=1)
    accuracies: list[float]


class Calibration(_Doc):
    runs: int = Field(gt=0)
    restarts: int = Field(ge=0)
    logprobs: LogprobsNoise | None = None
    eval: EvalNoise | None = None


class Golden(_Doc):
    """golden.json."""

    version: Literal[2]
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    checks: Sections
    calibration: Calibration | None = None

    def section(self, name: str) -> BaseModel | None:
        found: BaseModel | None = getattr(self.checks, name, None)
        return found


def schema() -> dict[str, Any]:
    """The JSON Schema of golden.json."""
    return Golden.model_json_schema()


def load(path: Path) -> Golden:
    """A golden file, checked whole: a wrong shape or type is one line naming the key."""
    try:
        data: Any = json.loads(read_capped(path, MAX_GOLDEN_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"golden: no such file '{path}'") from None
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not JSON text"
        raise ConfigError(f"golden: cannot read '{path}' ({reason})") from None
    if not isinstance(data, dict) or not isinstance(data.get("version"), int):
        raise ConfigError(f"golden: '{path}' is not an llm-bisect golden (version {VERSION})")
    if data["version"] != VERSION:
        raise ConfigError(
            f"golden: '{path}' is version {data['version']}, this llm-bisect reads version "
            f"{VERSION}; record it anew with `llm-bisect golden`"
        )
    try:
        return Golden.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"golden: '{path}' {where}: {err['msg']}") from None


def save(path: Path, golden: Golden, scrub: Scrub | None = None) -> None:
    """Write a golden atomically; every text passes through `scrub` (secrets, long texts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    clean = (scrub or Scrub()).doc(golden.model_dump(mode="json"))
    tmp.write_text(json.dumps(clean, indent=1) + "\n", encoding="utf-8")
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    tmp.replace(path)


def record(endpoint: ChatEndpoint, checks: Sequence[Check], commit: str) -> Golden:
    """A new golden from one endpoint (the good build), a section per check."""
    sections = {c.name: c.record(endpoint) for c in checks}
    return Golden.model_validate(
        {"version": VERSION, "commit": commit, "checks": Sections.model_validate(sections)}
    )


def missing(golden: Golden, checks: Sequence[Check]) -> None:
    """A check without its section is an error naming it (the golden was recorded with others)."""
    for check in checks:
        if golden.section(check.name) is None:
            raise ConfigError(
                f"golden: no '{check.name}' section (recorded with other checks; record it anew)"
            )


def thresholds(golden: Golden | None, checks: Sequence[Check]) -> dict[str, Any]:
    """Every check's thresholds, and the calibration they came from, for the report."""
    calibration = golden.calibration if golden else None
    return {
        "calibration": (
            {"runs": calibration.runs, "restarts": calibration.restarts} if calibration else {}
        ),
        **{c.name: t for c in checks if (t := c.thresholds(golden))},
    }


def warnings(golden: Golden) -> list[str]:
    """Where the good build itself fails a rule, so the rule cannot tell builds apart there. Pure.

    Each names the prompt and what would make it useful again.
    """
    found = []
    sections: list[tuple[str, Sequence[Answer]]] = []
    if golden.checks.canary:
        sections.append(("canary", golden.checks.canary.cases))
    if golden.checks.expect:
        sections.append(("expect", golden.checks.expect.cases))
    for name, cases in sections:
        for case in cases:
            where = f"{name}: the good build's answer to {case.prompt[:60]!r}"
            if case.cut and not (case.content and case.content.strip()):
                found.append(
                    f"{where} was cut at {case.max_tokens} tokens with no content, so only "
                    "degeneration is judged there (raise max_tokens_cap, or set "
                    'chat_template_kwargs such as {"enable_thinking": false})'
                )
            elif not (case.content and case.content.strip()):
                found.append(
                    f"{where} has no content ({case.finish_reason}), so null content is not "
                    "judged there (pick another prompt, or check the reasoning parser)"
                )
            elif isinstance(case, ExpectAnswer) and not case.matched:
                found.append(
                    f"{where} does not match /{case.match}/ either, so that case is not judged "
                    "(fix the pattern or the prompt)"
                )
    section = golden.checks.eval
    if section and section.cut_share:
        found.append(
            f"eval: {section.cut_share:.0%} of the good build's answers were cut at their "
            "budget; they are not counted (raise max_tokens_cap)"
        )
    return found


def needing(checks: Sequence[Check]) -> list[Check]:
    """The checks that cannot judge without a golden (logprobs, eval)."""
    return [c for c in checks if c.needs_golden]


class GoldenStore:
    """The golden of a run: loaded from `path`, or recorded there from the good end's probe.

    Without a file and without `record_on`, checks that need no golden (canary,
    expect) judge by absolute rules; the others are an error.
    """

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
        self.data: Golden | None = None
        if path.exists():
            self.data = load(path)
            if of is not None and self.data.commit != of:
                raise ConfigError(
                    f"golden: '{path}' was recorded from {self.data.commit[:12]}, not from "
                    f"the good end {of[:12]}; record it with `llm-bisect golden CONFIG "
                    f"--candidate {of}`, or leave out `golden` to record one into --out"
                )
            missing(self.data, self.checks)
        elif record_on is None and needing(self.checks):
            names = ", ".join(c.name for c in needing(self.checks))
            raise ConfigError(
                f"golden: {names} compare with a golden, and '{path}' does not exist; "
                "record one with `llm-bisect golden` or `llm-bisect calibrate`"
            )

    def ensure(self, endpoint: ChatEndpoint, commit: str) -> Golden | None:
        """The golden, recorded from this endpoint first if it is the good end's and none exists."""
        if self.data is not None or self.record_on is None:
            return self.data
        if commit != self.record_on:
            raise ConfigError(f"golden: none recorded yet, and {commit[:12]} is not the good end")
        self.data = record(endpoint, self.checks, commit)
        save(self.path, self.data, self.scrub)
        return self.data

    def update(self, golden: Golden) -> None:
        """Replace the golden (calibration added) and write it."""
        self.data = golden
        save(self.path, golden, self.scrub)
