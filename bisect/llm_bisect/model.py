"""Values shared by the core: verdicts, candidates, check results.

Everything here is a frozen value with no I/O, so the search, the verdict
policy and the report can be tested without a server.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from .fingerprint import Fingerprint
from .jsonvalue import Json

if TYPE_CHECKING:
    from .startup import Startup

_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class CandidateDoc(TypedDict, total=False):
    """A Candidate as JSON (`Candidate.to_json`): a journal's plan, result.json's."""

    commit: str
    subject: str
    author: str
    date: str
    artifact: str


class CheckDoc(TypedDict, total=False):
    """A CheckResult as JSON (`CheckResult.to_json`)."""

    name: str
    passed: bool
    score: float
    evidence: str
    details: dict[str, Json]


class OutcomeDoc(TypedDict, total=False):
    """A ProbeOutcome as JSON (`ProbeOutcome.to_json`): a journal's `probe` event's outcome."""

    commit: str
    verdict: str
    reason: str
    checks: list[CheckDoc]
    timings: dict[str, float]
    log_tail: str
    fingerprint: dict[str, Json]
    startup: dict[str, Json]
    not_run: list[str]
    failed_at: str
    leaning: str


SEED = 1234
"""The sampling seed sent with every generating request (chat and completions, the
teacher-forced ones included), beside `temperature: 0`: a server samples the same way on
every start."""
GREEDY: Mapping[str, float | int] = {"temperature": 0.0, "top_p": 1.0, "seed": SEED}
"""The sampling fields of every generating request (client.py), as a report's `curl` sends
them too."""


class Verdict(str, enum.Enum):
    """What one probe says about one candidate."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"
    """Untestable (no artifact, failed start, timeout, crash): never evidence of badness."""
    UNSURE = "unsure"
    """The checks disagreed across repeats."""


class Regress(str, enum.Enum):
    """What counts as a regression: the user's choice, as cargo-bisect-rustc's `--regress`."""

    SEMANTIC = "semantic"
    """Failed checks are bad; a crash, 5xx or reset during checks is skip (the default)."""
    CRASH = "crash"
    """A crash, 5xx or reset during checks is bad; failed checks are not a regression."""
    ANY = "any"
    """Both are bad."""
    START = "start"
    """A build that never became ready is bad; one that did is good, whatever its checks
    said (for bisecting a start failure: the first build that does not start)."""


class Stage(str, enum.Enum):
    """Where a probe stopped short of a verdict from its checks (a skip's cause, or a bad
    one's under `regress: crash`, `any` or `start`)."""

    ARTIFACT = "artifact"
    """No artifact: no route builds it, no image holds it."""
    LAUNCH = "launch"
    """Its build, pull or launch failed, or another process took its port: no server of
    it was waited on."""
    READY = "ready"
    """Its server ran but never became ready: it exited first, or its deadline passed."""
    CHECKS = "checks"
    """The server was ready, then crashed, failed or could not answer during checks."""


@dataclass(frozen=True)
class Candidate:
    """One testable build: a commit (40 hex) and what a maintainer reads about it."""

    commit: str
    """The full 40-hex commit id."""
    subject: str = ""
    """First line of the commit message."""
    author: str = ""
    """Author as `Name <email>`."""
    date: str = ""
    """Author date, ISO 8601."""
    artifact: str = ""
    """What runs this commit when it is not the launcher's template: an image named as an end."""

    def __post_init__(self) -> None:
        if not _SHA_RE.match(self.commit):
            raise ValueError(f"a commit is 40 lowercase hex digits, got {self.commit!r}")

    @property
    def short(self) -> str:
        """The 12-hex form, for display and folder names only."""
        return self.commit[:12]

    def to_json(self) -> CandidateDoc:
        data: CandidateDoc = {
            "commit": self.commit,
            "subject": self.subject,
            "author": self.author,
            "date": self.date,
        }
        if self.artifact:
            data["artifact"] = self.artifact
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Candidate:
        return cls(
            commit=str(data["commit"]),
            subject=str(data.get("subject", "")),
            author=str(data.get("author", "")),
            date=str(data.get("date", "")),
            artifact=str(data.get("artifact", "")),
        )


DETAILS: dict[str, type[CheckDetails]] = {}
"""A check's name → the model of its details (filled as each check module defines its own)."""


class CheckDetails(BaseModel):
    """What a check found, case by case: each check module subclasses it with its own fields
    and names its check (`check = "canary"`), which registers it for reading documents back.
    A check without its own model (a toy one) keeps its facts as they are."""

    model_config = ConfigDict(extra="allow", frozen=True)
    check: ClassVar[str] = ""
    """The name of the check these details are of ("" for the base)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.check:
            DETAILS[cls.check] = cls


class Cap(BaseModel):
    """The byte cap a server's reply passed."""

    model_config = ConfigDict(frozen=True)
    cap_bytes: int


class TooLargeDetails(CheckDetails):
    """Any check whose server sent a reply over the byte cap: it failed with only that."""

    model_config = ConfigDict(extra="forbid")
    reply_too_large: Cap


class Threshold(BaseModel):
    """A threshold a check judged by, and where its value came from."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)
    value: int | float
    source: str = Field(validation_alias=AliasChoices("from", "source"), serialization_alias="from")
    """`default`, `config`, `calibration (0.0123 x 3)`, ..."""


def details_of(name: str, data: Any) -> CheckDetails:
    """`data` read back as the details of the check called `name`."""
    if isinstance(data, CheckDetails):
        return data
    if isinstance(data, dict) and "reply_too_large" in data:
        return TooLargeDetails.model_validate(data)
    model = DETAILS.get(name, CheckDetails)
    return model.model_validate(data if data is not None else {})


@dataclass(frozen=True)
class CheckResult:
    """What one check concluded about one endpoint."""

    name: str
    """The check's name, e.g. `canary` or `expect`."""
    passed: bool
    """True when the endpoint behaved like a healthy build."""
    score: float
    """A number in [0, 1]: the share of the check's cases that passed."""
    evidence: str
    """A short, human-readable excerpt: what the model said and why it failed or passed."""
    details: CheckDetails = field(default_factory=CheckDetails)
    """Per-case facts (prompts, outputs, metrics): the check's own model (checks/<name>.py)."""

    def __post_init__(self) -> None:
        if not isinstance(self.details, CheckDetails):  # a check's facts as a plain mapping
            object.__setattr__(self, "details", details_of(self.name, self.details))

    def to_json(self) -> CheckDoc:
        return {
            "name": self.name,
            "passed": self.passed,
            "score": self.score,
            "evidence": self.evidence,
            "details": self.details.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: CheckDoc) -> CheckResult:
        return cls(
            name=str(data["name"]),
            passed=bool(data["passed"]),
            score=float(data["score"]),
            evidence=str(data.get("evidence", "")),
            details=details_of(str(data["name"]), data.get("details")),
        )


@dataclass(frozen=True)
class ProbeOutcome:
    """One candidate launched and checked: the verdict and why."""

    commit: str
    """The candidate's 40-hex commit."""
    verdict: Verdict
    """good, bad, skip or unsure."""
    reason: str = ""
    """Why: the failing check, or what made the build untestable."""
    checks: tuple[CheckResult, ...] = ()
    """The check results of the (last) repeat."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent per phase: `launch`, `ready`, `checks`, `total`."""
    log_tail: str = ""
    """Last lines of the server log, kept when the build was untestable."""
    fingerprint: Fingerprint = field(default_factory=Fingerprint)
    """What the build really was: image, server version, packages, kernels (fingerprint.py)."""
    startup: Startup | None = None
    """Where the wait for the server went, phase by phase, from its log (startup.py)."""
    not_run: tuple[str, ...] = ()
    """Checks the suite did not run: it stopped at a decisive failure (`probe.early_stop`)."""
    failed_at: Stage | None = None
    """Where the probe stopped short (no artifact, no launch, never ready, crashed in checks);
    None when its checks ran to a verdict."""
    leaning: Verdict | None = None
    """`unsure`: what most of its repeats said (good or bad; None on a tie). The repeats ran
    on one server: together one observation, which the posterior search weighs."""
    slot: int | None = field(default=None, compare=False)
    """The slot its server ran on, as the journal's events say (not part of the outcome's
    JSON: the runner and the journal's reader set it; slot evidence for the search)."""
    began: float | None = field(default=None, compare=False)
    """When its probe started (wall clock), as the journal's events say; like `slot`."""

    def __post_init__(self) -> None:
        if not isinstance(self.fingerprint, Fingerprint):  # the facts as a plain mapping
            object.__setattr__(self, "fingerprint", Fingerprint.model_validate(self.fingerprint))

    def to_json(self) -> OutcomeDoc:
        data: OutcomeDoc = {
            "commit": self.commit,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "checks": [c.to_json() for c in self.checks],
            "timings": self.timings,
            "log_tail": self.log_tail,
            "fingerprint": self.fingerprint.model_dump(mode="json"),
        }
        if self.startup is not None:
            data["startup"] = self.startup.model_dump(mode="json")
        if self.not_run:
            data["not_run"] = list(self.not_run)
        if self.failed_at is not None:
            data["failed_at"] = self.failed_at.value
        if self.leaning is not None:
            data["leaning"] = self.leaning.value
        return data

    @property
    def never_started(self) -> bool:
        """The server ran but never became ready (not: no artifact, no build)."""
        return self.failed_at is Stage.READY

    @classmethod
    def from_json(cls, data: OutcomeDoc) -> ProbeOutcome:
        return cls(
            commit=str(data["commit"]),
            verdict=Verdict(data["verdict"]),
            reason=str(data.get("reason", "")),
            checks=tuple(CheckResult.from_json(c) for c in data.get("checks", [])),
            timings={str(k): float(v) for k, v in data.get("timings", {}).items()},
            log_tail=str(data.get("log_tail", "")),
            fingerprint=Fingerprint.model_validate(data.get("fingerprint") or {}),
            startup=_startup(data.get("startup")),
            not_run=tuple(str(name) for name in data.get("not_run", ())),
            failed_at=Stage(data["failed_at"]) if data.get("failed_at") else None,
            leaning=Verdict(data["leaning"]) if data.get("leaning") else None,
        )


def _startup(data: Any) -> Startup | None:
    if data is None:
        return None
    from .startup import Startup  # startup.py imports this module

    return Startup.model_validate(data)


@dataclass(frozen=True)
class Step:
    """One generated position: the token (an id, or its text), its logprob, the top-k."""

    token: str
    logprob: float
    top: Mapping[str, float]
