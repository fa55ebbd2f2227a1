"""The golden: reference outputs recorded from the good build, and the noise floor.

A typed document (`Golden`, JSON Schema from `schema()`), one section per check:

    {"version": 2, "commit": ..., "checks": {"canary": {...}, "expect": {...},
     "logprobs": {...}, "eval": {...}}, "calibration": {"runs": N, ...} | null,
     "identity": {"model", "served", "server", "checks", "repository"},
     "fingerprint": {"image", "server", "packages", "kernels", "command", ...}}

The identity says what the golden was recorded with: the model, digests of the server
command and of each check's settings, the repository. A config that would record another
is refused before anything starts (`mismatch`), and so is a golden without one (an older
llm-bisect's: nothing says what it is of); `gate --record` records anew (`stale`).

Every check records its section from the good build: the answers, the
`finish_reason` and the token budget each prompt finished in. Later builds are
judged against it (it is passed to each check's `run`): a rule counts only
where the good build passed it, and with the budget the good build needed.
Checks with thresholds (logprobs, eval) take them from the config, else from
calibration (the good build checked against itself), else from defaults.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import BrokenGoodEnd, ConfigError
from ..files import read_capped, write_atomic
from ..fingerprint import Fingerprint
from ..model import ProbeOutcome, Regress, Stage, Threshold, Verdict
from ..redact import Scrub
from ..sparse import AddedLater
from .metrics import degeneration
from .reply import judge_reply

if TYPE_CHECKING:
    from . import Check, ServedEndpoint

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
    completion_tokens: int | None = Field(default=None, ge=0)
    """The tokens it took, reasoning included, when the server said."""

    @property
    def cut(self) -> bool:
        return self.finish_reason == "length"

    @property
    def used(self) -> int:
        """The tokens it took: the server's count, else its budget."""
        return self.completion_tokens or self.max_tokens

    @property
    def finished_in(self) -> int | None:
        """The tokens it finished in (at most); None when the budget cut it."""
        return None if self.cut else self.used


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


class EvalSection(_Doc, AddedLater):
    added_later: ClassVar[tuple[str, ...]] = ("null_content",)

    n: int = Field(gt=0)
    correct: int = Field(ge=0)
    accuracy: float = Field(ge=0, le=1)
    wilson95: tuple[float, float]
    invalid_share: float = Field(ge=0, le=1)
    null_share: float = Field(ge=0, le=1)
    null_content: int | None = Field(default=None, ge=0)
    """Answers whose content is null or empty (None: recorded before it was counted)."""
    cut_share: float = Field(default=0.0, ge=0, le=1)
    answers: list[str | None]
    budgets: list[int] = Field(default_factory=list)
    """Per problem, the budget its answer finished in."""
    finish_reasons: list[str | None] = Field(default_factory=list)
    """Per problem, how its answer ended (empty in goldens recorded before these were kept)."""
    completion_tokens: list[int | None] = Field(default_factory=list)
    """Per problem, the tokens its answer took, when the server said."""

    def finished_in(self, i: int) -> int | None:
        """The tokens problem i's answer finished in (at most); None when the budget cut it,
        or when this golden did not keep how it ended."""
        if i >= len(self.finish_reasons) or self.finish_reasons[i] == "length":
            return None
        used = self.completion_tokens[i] if i < len(self.completion_tokens) else None
        return used or (self.budgets[i] if i < len(self.budgets) else None)


class SampleRun(AddedLater):
    """One task's result from one build."""

    added_later: ClassVar[tuple[str, ...]] = ("not_numbers",)

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    """The per-document metric judged, `name,filter`."""
    value: float
    """Its aggregate over the documents (lm-eval's)."""
    values: dict[str, float] = Field(default_factory=dict)
    """Every aggregate lm-eval reported for the task (`exact_match,flexible-extract`, ...)."""
    not_numbers: list[str] = Field(default_factory=list)
    """The aggregates it reported as NaN or infinite: no floor passes them."""
    doc_ids: list[int]
    correct: list[bool]
    """Per document (in `doc_ids` order): right by `metric`."""


class LmEvalSection(BaseModel):
    """The good build's lm-eval results, per task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tasks: dict[str, SampleRun] = Field(min_length=1)
    seconds: float = 0.0
    """How long lm-eval ran."""


class Sections(_Doc, AddedLater):
    model_config = ConfigDict(extra="allow", frozen=True)
    """Beside the built-in checks' sections: those of checks registered elsewhere (kinds)."""

    added_later: ClassVar[tuple[str, ...]] = ("lm_eval",)

    canary: CanarySection | None = None
    expect: ExpectSection | None = None
    logprobs: LogprobsSection | None = None
    eval: EvalSection | None = None
    lm_eval: LmEvalSection | None = None


class LogprobsNoise(_Doc):
    max_abs_delta: float = Field(ge=0)
    teacher_mean_abs_delta: float = Field(ge=0)
    topk_max_abs_delta: float = Field(default=0.0, ge=0)
    not_close: int = Field(ge=0)
    min_agreement: float = Field(ge=0, le=1)


class EvalNoise(_Doc):
    accuracy_spread: float = Field(ge=0, le=1)
    accuracies: list[float]
    flips: float = Field(default=0.0, ge=0, le=1)
    """The largest share of answers the good build answered otherwise than its golden (right
    for wrong, or wrong for right) in one run: chance, for the eval's stated power."""


class Calibration(_Doc):
    runs: int = Field(gt=0)
    restarts: int = Field(ge=0)
    flagged_restarts: int = Field(default=0, ge=0)
    """Starts after the one that recorded the golden whose checks flagged the good build
    against it (by the thresholds then): how often a good build's start reads bad, which the
    posterior search (`search.flake: auto`) weighs with its own verdicts."""
    logprobs: LogprobsNoise | None = None
    eval: EvalNoise | None = None


class Identity(_Doc):
    """What a golden was recorded with. It judges builds served and checked the same way only:
    with another model, other prompts or another server command, every comparison with it
    says something about the difference of setups, nothing about the candidate."""

    model: str | None = None
    """`server.model` of the config (None: the first model the server lists)."""
    served: str = ""
    """The model name the good build served, as its requests carry it."""
    server: str
    """A digest of how the server was started (config.server_digest)."""
    checks: dict[str, str]
    """Per check, a digest of the settings that shape its section (config.check_digest)."""
    repository: str = ""
    """The repository's web address, when known; the golden's commit is in candidates.repo."""


class Loads(_Doc):
    """Which files the good end's server executed (loads.py: the path hook in every Python
    process of the server), read after its checks: what a candidate's prior is weighed by
    (priors.py, `search.priors`)."""

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    """The commit the record was taken at (the good end)."""
    files: list[str]
    """Each module file imported, relative to its top-level package's folder
    (`vllm/model_executor/models/llama.py`), sorted; the standard library's left out."""


class Golden(_Doc, AddedLater):
    """golden.json."""

    added_later: ClassVar[tuple[str, ...]] = ("loads",)

    version: Literal[2]
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    checks: Sections
    calibration: Calibration | None = None
    identity: Identity | None = None
    """What it was recorded with; None in a golden an older llm-bisect wrote (refused where
    a config is compared with it: it has to be recorded anew)."""
    fingerprint: Fingerprint = Field(default_factory=Fingerprint)
    """The good build's fingerprint (image, versions, packages, kernels, the server command)
    as the probe that recorded the golden found it: a gate compares the candidate's build
    with it. Empty in a golden recorded before llm-bisect kept it."""
    loads: Loads | None = None
    """The files the good end's server executed; None where the launcher's server could not
    report them (a container, a pod) or the golden is older than the record."""

    def section(self, name: str) -> BaseModel | None:
        found: BaseModel | None = getattr(self.checks, name, None)
        return found


def schema() -> dict[str, Any]:
    """The JSON Schema of golden.json."""
    return Golden.model_json_schema()


def _document(path: Path) -> dict[str, Any]:
    """A golden file's JSON object, with an integer `version`; one line naming the problem."""
    try:
        data: Any = json.loads(read_capped(path, MAX_GOLDEN_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"golden: no such file '{path}'") from None
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not JSON text"
        raise ConfigError(f"golden: cannot read '{path}' ({reason})") from None
    if not isinstance(data, dict) or not isinstance(data.get("version"), int):
        raise ConfigError(f"golden: '{path}' is not an llm-bisect golden (version {VERSION})")
    return data


def load(path: Path) -> Golden:
    """A golden file, checked whole: a wrong shape or type is one line naming the key."""
    data = _document(path)
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
    clean = (scrub or Scrub()).doc(golden.model_dump(mode="json"))
    write_atomic(path, json.dumps(clean, indent=1) + "\n")


def record(
    endpoint: ServedEndpoint,
    checks: Sequence[Check],
    commit: str,
    identity: Identity | None = None,
) -> Golden:
    """A new golden from one endpoint (the good build), a section per check, stamped with
    what it was recorded with (`identity`, and the model the endpoint serves)."""
    sections = {c.name: c.record(endpoint) for c in checks}
    made = identity.model_copy(update={"served": endpoint.model}) if identity else None
    return Golden.model_validate(
        {
            "version": VERSION,
            "commit": commit,
            "checks": Sections.model_validate(sections),
            "identity": made,
        }
    )


def mismatch(golden: Golden, expected: Identity) -> str | None:
    """How a golden differs from one the config would record now (`expected`; its `served`
    is known only once a server runs), or None. Pure.

    The config's model counts where it names one; the server command, each check's
    settings and the checks present must be the same."""
    made = golden.identity
    if made is None:
        return "does not say what it was recorded with (an older llm-bisect)"
    if expected.model is not None and expected.model not in (made.model, made.served):
        return f"was recorded serving {made.served!r}, and server.model is {expected.model!r}"
    if made.server != expected.server:
        return "was recorded with another server command (command, image, args or env)"
    for i, (name, digest) in enumerate(expected.checks.items()):
        if golden.section(name) is None:
            return f"has no '{name}' section (checks.{i}; recorded with other checks)"
        if made.checks.get(name) != digest:
            return f"was recorded with other '{name}' settings (checks.{i})"
    return None


def stale(path: Path, commit: str, expected: Identity) -> str | None:
    """Why the golden at `path` is to be recorded anew from `commit` under `expected` (there
    is none, it is of another build, version or setup), or None when it serves. A file that
    is no llm-bisect golden at all is an error, never overwritten."""
    if not path.exists():
        return "there is none"
    version = _document(path)["version"]
    if version != VERSION:
        return f"it is version {version}"
    golden = load(path)
    if golden.commit != commit:
        return f"it is of {golden.commit[:12]}"
    return mismatch(golden, expected)


def missing(golden: Golden, checks: Sequence[Check]) -> None:
    """A check without its section is an error naming it (the golden was recorded with others)."""
    for check in checks:
        if golden.section(check.name) is None:
            raise ConfigError(
                f"golden: no '{check.name}' section (recorded with other checks; record it anew)"
            )


def thresholds(golden: Golden | None, checks: Sequence[Check]) -> dict[str, dict[str, Threshold]]:
    """Every check's thresholds with this golden, and where each came from."""
    return {c.name: t for c in checks if (t := c.thresholds(golden))}


def broken(golden: Golden) -> list[str]:
    """The canary prompts the good build itself answers badly by the canary's absolute rules
    (reply.judge_reply without a baseline): content null or empty (not cut by its budget),
    or content or reasoning degenerate. Pure."""
    section = golden.checks.canary
    cases = section.cases if section else []
    return [c.prompt for c in cases if judge_reply(c.content, c.reasoning, c.finish_reason)]


def non_finite(golden: Golden) -> list[str]:
    """The logprobs prompts where the good build's own logprobs are NaN or +inf (no logprob
    is either; -inf is probability 0, which the client writes as vLLM does). Pure."""
    section = golden.checks.logprobs
    cases = section.cases if section else []
    return [
        c.prompt
        for c in cases
        if any(
            not math.isfinite(v) and v != -math.inf
            for _, lp, top in c.steps
            for v in (lp, *top.values())
        )
        or any(v is not None and not math.isfinite(v) and v != -math.inf for v in c.teacher)
    ]


def refuse_broken(golden: Golden) -> None:
    """BrokenGoodEnd when more than half the canary prompts are answered badly by the build
    the golden comes from, or when its own logprobs are NaN: every build would then test good
    against it."""
    nan = non_finite(golden)
    if nan:
        raise BrokenGoodEnd(
            f"the good end {golden.commit[:12]} sends NaN or infinite logprobs for "
            f"{len(nan)} logprobs prompt(s) ({nan[0][:40]!r}): a golden recorded from it "
            "compares with no number. Pick an older good end; its golden is not kept"
        )
    bad = broken(golden)
    section = golden.checks.canary
    total = len(section.cases) if section else 0
    if total and 2 * len(bad) > total:
        shown = ", ".join(repr(p[:40]) for p in bad[:3]) + (", ..." if len(bad) > 3 else "")
        raise BrokenGoodEnd(
            f"the good end {golden.commit[:12]} answers {len(bad)} of {total} canary prompts "
            f"with degenerate or empty content ({shown}): a golden recorded from it would call "
            "every build good. Pick an older good end (the regression may be older than this "
            "range); its golden is not kept"
        )


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
            elif degeneration(case.content) or degeneration(case.reasoning):
                found.append(
                    f"{where} is degenerate itself, so degeneration there counts only where a "
                    "build is clearly worse (pick another prompt, or an older good end)"
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


def unjudged(
    path: Path, good: str, wanted: Collection[str], probes: Sequence[ProbeOutcome], regress: Regress
) -> str | None:
    """Why the candidates `wanted` (the search's next probes) cannot be judged, where the
    golden is recorded from the good end `good` into `path`: its probes ended and no golden
    is there. Every probe of it crashed during its checks (bad under `regress: crash` or
    `any`): none was recorded, and the good end is bad; else the file is gone (moved, or
    never copied with DIR). None where they can be judged, where the good end is among them
    (it records one), or where a crash left it good (`regress: start`). Pure but for
    whether `path` exists."""
    ends = [p for p in probes if p.commit == good]
    if not ends or good in wanted or path.exists():
        return None
    short = good[:12]
    if all(p.failed_at is Stage.CHECKS for p in ends):
        if any(p.verdict is not Verdict.BAD for p in ends):
            return None
        return (
            f"the good end {short} is bad under regress: {regress.value} (it crashed during "
            "its checks): nothing to bisect"
        )
    return (
        f"golden: '{path}' is missing; the good end {short} recorded it and every verdict so "
        f"far was judged by it: put it back (or record one from {short} into it with "
        "`llm-bisect golden`), then run again"
    )


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
        identity: Identity | None = None,
        compare: bool = True,
        known: Callable[[str], bool] | None = None,
    ) -> None:
        """`of`: the commit the golden must have been recorded from (the good end);
        `identity`: what the config would record a golden with (one recorded here is stamped
        with it; with `compare`, a golden of another setup is refused); `known`: whether a
        commit is in candidates.repo (a golden of another repository is refused)."""
        self.path = path
        self.checks = list(checks)
        self.record_on = record_on
        self.scrub = scrub or Scrub()
        self.identity = identity
        self.data: Golden | None = None
        self.recorded = False
        """True once this store recorded the golden (from the good end's probe)."""
        if path.exists():
            self.data = load(path)
            if of is not None and self.data.commit != of:
                raise ConfigError(
                    f"golden: '{path}' was recorded from {self.data.commit[:12]}, not from "
                    f"the good end {of[:12]}; record it with `llm-bisect golden CONFIG "
                    f"--candidate {of}`, or leave out `golden` to record one into --out"
                )
            if known is not None and not known(self.data.commit):
                raise ConfigError(
                    f"golden: '{path}' was recorded from {self.data.commit[:12]}, which is not "
                    "in candidates.repo: a golden of another repository"
                )
            why = mismatch(self.data, identity) if identity is not None and compare else None
            if why is not None:
                raise ConfigError(
                    f"golden: '{path}' {why}; record it anew: `llm-bisect golden CONFIG "
                    f"--candidate {self.data.commit[:12]}`, or gate --record"
                )
            missing(self.data, self.checks)
        elif record_on is None and needing(self.checks):
            names = ", ".join(c.name for c in needing(self.checks))
            raise ConfigError(
                f"golden: {names} compare with a golden, and '{path}' does not exist; "
                "record one with `llm-bisect golden` or `llm-bisect calibrate`"
            )

    def ensure(self, endpoint: ServedEndpoint, commit: str) -> Golden | None:
        """The golden, recorded from this endpoint first if it is the good end's and none exists."""
        if self.data is not None or self.record_on is None:
            return self.data
        if commit != self.record_on:
            raise ConfigError(f"golden: none recorded yet, and {commit[:12]} is not the good end")
        data = record(endpoint, self.checks, commit, self.identity)
        refuse_broken(data)  # not kept: a run again records anew
        self.data = data
        self.recorded = True
        save(self.path, self.data, self.scrub)
        return self.data

    def unjudged(
        self, wanted: Collection[str], probes: Sequence[ProbeOutcome], regress: Regress
    ) -> str | None:
        """Why the search's next probes `wanted` cannot be judged (unjudged): a golden to be
        recorded from the good end, whose probes ended without one; None where they can."""
        if self.data is not None or self.record_on is None:
            return None
        return unjudged(self.path, self.record_on, wanted, probes, regress)

    def keep(
        self, commit: str, fingerprint: Fingerprint, loads: Sequence[str] | None = None
    ) -> None:
        """Stamp a golden this store recorded with the fingerprint of the build it came from,
        once that build's probe ended (its startup log names the kernels only then), and the
        files its server executed (`loads`, where the hook reported any)."""
        if self.recorded and self.data is not None and self.data.commit == commit:
            update: dict[str, Any] = {"fingerprint": fingerprint}
            if loads is not None:
                update["loads"] = Loads(commit=commit, files=list(loads))
            self.update(self.data.model_copy(update=update))

    def records(self, commit: str) -> bool:
        """Whether the probe of `commit` records this golden (its server reports its loads)."""
        return self.data is None and self.record_on == commit

    def update(self, golden: Golden) -> None:
        """Replace the golden (calibration added) and write it."""
        self.data = golden
        save(self.path, golden, self.scrub)
