"""result.json and gate.json as typed documents: what users script against, with a version
and a JSON Schema (`llm-bisect schema --result`, `--gate`; copies in schemas/).

The writers build these; the markdown and HTML renderers read them. Pure.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationInfo,
    field_validator,
)

from ..checks.canary import CanaryDetails
from ..checks.eval import EvalDetails, Power
from ..checks.expect import ExpectDetails
from ..checks.lm_eval import LmEvalDetails
from ..checks.logprobs import LogprobsDetails
from ..fingerprint import Fingerprint
from ..localize import LocalizationDoc
from ..model import (
    CheckDetails,
    Regress,
    Stage,
    Threshold,
    TooLargeDetails,
    Verdict,
    details_of,
)
from ..search import Mode, Status
from ..sparse import AddedLater
from ..startup import Startup

__all__ = ["LocalizationDoc", "Power"]

RESULT_VERSION: Final = 2
"""result.json's version: 2 is the first typed one (a document without `version` is 1)."""
GATE_VERSION: Final = 1


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CandidateDoc(_Doc, AddedLater):
    """One commit, as a maintainer reads it."""

    added_later: ClassVar[tuple[str, ...]] = ("posterior",)

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    subject: str = ""
    author: str = ""
    date: str = ""
    artifact: str = ""
    """The image named as an end, when one ran this commit."""
    posterior: float | None = None
    """The culprit's posterior (the posterior search, `search.flake` other than 0)."""


Details = (
    CanaryDetails
    | ExpectDetails
    | LogprobsDetails
    | EvalDetails
    | LmEvalDetails
    | TooLargeDetails
    | CheckDetails
)
"""A check's details: the model of its module (by the check's name), any check's reply over
the byte cap, or (a check without its own model) its facts as they are."""


class CheckDoc(_Doc):
    """What one check concluded on one build."""

    name: str
    passed: bool
    score: float
    evidence: str = ""
    details: SerializeAsAny[Details] = Field(default_factory=CheckDetails)
    """Per-case facts; their shape is the check's (see its module's `...Details`)."""

    @field_validator("details", mode="before")
    @classmethod
    def _by_name(cls, data: Any, info: ValidationInfo) -> Any:
        return details_of(str(info.data.get("name", "")), data)


class ProbeDoc(_Doc, AddedLater):
    """One candidate launched and checked."""

    added_later: ClassVar[tuple[str, ...]] = ("startup", "not_run", "failed_at")

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    verdict: Verdict
    reason: str = ""
    checks: list[CheckDoc] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds since the probe began at which each phase ended: artifact, launch, ready,
    then `checks` (their own duration) and `total`."""
    log_tail: str = ""
    fingerprint: Fingerprint = Field(default_factory=Fingerprint)
    """What the build really was (image, versions, kernels, build route) and `command`, the
    server command line it ran with."""
    startup: Startup | None = None
    """Where the wait until ready went, phase by phase, from the server's own log lines."""
    not_run: list[str] = Field(default_factory=list)
    """Checks not run: the suite stopped at a decisive failure (`probe.early_stop`)."""
    failed_at: Stage | None = None
    """Where it stopped short: `artifact` (none), `launch` (build, pull or launch failed),
    `ready` (its server never became ready), `checks` (crashed or failed in checks)."""
    subject: str = ""
    started_at: float | None = None
    """Wall-clock (Unix) time the probe began; None for a verdict the run was given."""
    ended_at: float | None = None
    given: str = ""
    """Where a verdict came from when no probe of this run made it (e.g. `gate`)."""
    slot: int | None = None
    """The slot it ran on (0 .. parallel-1)."""
    round: int | None = None
    """One more than the latest round whose answer was in when it started (1-based)."""


class Reversal(_Doc):
    """Verdicts that are not monotone: `old` tested in the old state (good; bad with
    --find-fix) though `new`, before it in the sequence, tested in the new state."""

    new: str = Field(pattern=r"^[0-9a-f]{40}$")
    old: str = Field(pattern=r"^[0-9a-f]{40}$")


class Retest(_Doc):
    """A candidate probed more than once, and what each probe said."""

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    verdicts: list[Verdict]
    flaky: bool = False
    """Good and bad both: the build counts as unsure, never as evidence."""


class Step(_Doc):
    """The range after one probe: the culprit lies in `lo`+1..`hi` (indices into the plan's
    sequence, old end 0)."""

    probe: int
    """1-based position in `probes`."""
    commit: str
    index: int
    verdict: Verdict
    lo: int
    hi: int


class Build(Fingerprint):
    """One of two builds compared side by side: its commit, verdict and fingerprint."""

    commit: str
    verdict: Verdict | None = None
    """None for a golden's build (it was recorded, not judged)."""

    @classmethod
    def of(cls, commit: str, verdict: Verdict | None, fingerprint: Fingerprint) -> Build:
        """A build to compare: its commit and verdict beside its fingerprint."""
        facts = fingerprint.model_dump()
        given = {} if verdict is None else {"verdict": verdict}
        return cls.model_validate({"commit": commit, **given, **facts})


class Sides(_Doc):
    """The builds either side of the change, for comparison."""

    old: Build
    new: Build
    differences: list[str]


class Expected(_Doc):
    """What the run was expected to cost before it started (cost.py): the figure `candidates`
    and the progress line gave."""

    starts: float
    """Server starts expected (the search, its confirmation, the stages after it)."""
    worst: int
    """The most, if no verdict lies (every stage, every further culprit)."""
    nodes: int = 1
    """Nodes one server takes."""


class Context(_Doc, AddedLater):
    """How the run was asked for and where it ran: what a bug report needs besides results."""

    added_later: ClassVar[tuple[str, ...]] = ("out", "config_text", "caveats", "expected")

    good_ref: str = ""
    """candidates.good as the user gave it (a tag, a branch, an image)."""
    bad_ref: str = ""
    config: str = ""
    """The config file: its absolute path (older runs: as given on the command line)."""
    repo: str = ""
    """The clone `--repo` named (absolute); "": candidates.repo, relative to the config."""
    golden: str = ""
    """The golden the run judged by (absolute): the config's, `--golden`, or DIR's own."""
    repo_url: str = ""
    """The repository's web address (candidates.url, else from the remote), for links."""
    environment: dict[str, Any] = Field(default_factory=dict)
    """The node: GPUs, driver, CUDA (from nvidia-smi), OS, Python, llm-bisect."""
    out: str = ""
    """The run's folder (absolute), for the commands that resume it; "": not recorded."""
    config_text: str = ""
    """The config as it may be shared (YAML; a secret variable by its name, `${HF_TOKEN}`,
    any other secret masked): report.md embeds it; "": not recorded."""
    caveats: list[str] = Field(default_factory=list)
    """What the setup cannot promise, a sentence each (the launcher's: echoes of secrets it
    never reads go unmasked): report.md's caveats."""
    expected: Expected | None = None
    """What the run was expected to cost (None: not recorded, an older run)."""


class ConfirmProbe(_Doc):
    """One build of confirmation: the culprit reverted on the bad end, or picked on the good."""

    kind: Literal["revert", "pick"]
    onto: str
    commit: str | None
    """The commit made (under refs/llm-bisect/confirm/); None when it could not be."""
    verdict: Literal["good", "bad"] | None
    reason: str
    reused: str | None = None
    """The commit probed in the run whose tree this is: its verdict, no probe."""
    slot: int | None = None
    """The slot its server ran on (never where the verdicts it checks ran, where there is
    another); None where no probe ran or an older run did not say."""
    began: float | None = None
    """When its probe started (wall clock)."""
    place: str | None = None
    """The node and GPUs its server ran on, as its fingerprint says (`node gpu-17, GPUs
    0-3`); None where it does not say, or no probe ran."""


class Confirmation(_Doc):
    status: Literal["confirmed", "not-confirmed", "cannot-confirm"]
    reason: str
    probes: list[ConfirmProbe]
    continued: dict[str, Any] | None = None
    """The bisection of what remains on the reverted line (several culprits: `search.culprits`,
    `confirm: continue`): the next culprit; every one is in result.json `culprits`."""


class CulpritDoc(_Doc):
    """One of several culprits (`search.culprits`), oldest first: each found by a bisection of
    the commits after the one before it, with every culprit before it reverted on each
    probe."""

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    """The commit of the history (not the reverted line's commit that stood for it)."""
    subject: str = ""
    reverted: list[str] = Field(default_factory=list)
    """The culprits reverted on every probe of the bisection that named it (none: the
    first)."""
    bisection: str = "result.json"
    """The result.json of the bisection that named it, relative to DIR."""
    message: str = ""
    """That bisection's answer."""
    verdicts: list[Verdict] = Field(default_factory=list)
    """Its own probes' verdicts in that bisection (the first bad)."""
    parent_verdicts: list[Verdict] = Field(default_factory=list)
    """Its parent's (the last good)."""


class Together(_Doc):
    """Several culprits confirmed as a whole: the bad end with every one of them reverted
    (one trial, the last culprit's revert on the line with the others reverted)."""

    status: Literal["confirmed", "not-confirmed", "cannot-confirm"]
    reason: str
    trial: ConfirmProbe | None = None
    """The bad end with them all reverted; None where none could be made or tested."""


class LaterDoc(_Doc):
    """A build newer than the bad end (`candidates.later`), probed once the culprit was
    found: where the regression ends."""

    ref: str
    """The ref as the config gives it."""
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    verdict: Verdict
    """good: good again; bad: still bad; skip or unsure: could not be tested."""
    reason: str = ""
    contains: bool = True
    """Whether the build has the culprit (`git merge-base --is-ancestor CULPRIT BUILD`): one
    that never had it (a nightly of main, the culprit a release branch's commit) is not good
    *again* and bounds no fix, whatever it reads."""


class BumpDoc(_Doc):
    """A dependency pin the culprit changes (pins.py): `flashinfer-python 0.6.15 → 0.6.16`."""

    name: str
    old: str
    """The old pin as written (`==0.6.15.post1`, `>=2.9`); "" where there was none."""
    new: str
    files: list[str] = Field(default_factory=list)
    label: str = ""


class PickDoc(_Doc):
    """A commit on another line that makes the culprit's change (sources/releases.py)."""

    commit: str
    tags: list[str] = Field(default_factory=list)
    branches: list[str] = Field(default_factory=list)


class ReachDoc(_Doc):
    """Where the culprit (a fix: the first good commit) lives (sources/releases.py): the
    release tags and branches that hold it, itself or picked."""

    tags: list[str] = Field(default_factory=list)
    """Tags that contain the commit itself, oldest first."""
    branches: list[str] = Field(default_factory=list)
    picks: list[PickDoc] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    """Release branches that hold neither the commit nor a pick of it."""
    backport: list[str] = Field(default_factory=list)
    """A fix: release branches that hold the regression (the old end) but not the fix."""
    sentence: str = ""
    """As report.md says it: `in v0.27.0 (picked as 5f1c…); on main; not on releases/v0.26`."""


class FastDoc(_Doc):
    """`probe.fast`: the search in the fast setup (DIR/fast), then its answer in the full."""

    args: list[str]
    env: dict[str, str]
    """The fast setup's variables (a secret's value masked)."""
    status: Status
    """The fast search's."""
    message: str
    reproduced: bool
    """Both ends reproduced in the fast setup, so the search ran in it; else in full."""
    range: list[str]
    """The fast answer: its last good, then every commit that could be the first bad."""
    probes: int
    """Probes in the fast setup (the full setup's are result.json's `probes`)."""
    agreed: bool | None
    """The full setup found what the fast one did; None where the ends did not reproduce."""
    line: str


class Disagreed(_Doc):
    """One verdict that disagrees with the answer."""

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    verdict: Verdict
    """What its probe said."""
    verdicts: list[Verdict]
    """What every probe of that commit said, in order."""


class Rates(_Doc):
    """How often a verdict lies, by what the build truly is."""

    false_bad: float
    """A good build's verdict reads bad."""
    false_good: float
    """A bad build's verdict reads good."""


class TrialDoc(_Doc):
    """A confirmation trial the search weighed as evidence (services/stages.py Confirm)."""

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    """The culprit the trial took back (`revert`, from the bad end) or made (`pick`)."""
    kind: Literal["revert", "pick"]
    verdict: Literal["good", "bad"]
    slot: int | None = None
    """The slot its server ran on; None where an older run did not say."""
    began: float | None = None
    """When its probe started (wall clock)."""
    place: str | None = None
    """The node and GPUs its server ran on, as its fingerprint says; None where not said."""


class KnownDoc(_Doc):
    """A verdict known from elsewhere (`candidates.known_verdicts`), weighed by the search at
    its own lie rate: not run here."""

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    verdict: Literal["good", "bad"]
    source: str
    """Where it comes from, as its file says."""
    rate: float
    """The lie rate it was weighed at."""


class PriorDoc(_Doc):
    """The candidates' prior weights (`search.priors`): from the files each touches against
    those the good end's server executed (the golden's `loads`)."""

    low: dict[str, float]
    """The commits weighed below 1, and their weights; every other candidate weighs 1."""
    candidates: int
    """The candidates after the old end (those the prior weighs)."""
    culprit: float | None = None
    """The prior mass the weights put on the culprit; None without one."""
    uniform: float | None = None
    """The prior mass a uniform prior puts on it."""


class LookDoc(_Doc):
    """One confirmation of the posterior search (services/stages.py Confirm), in order."""

    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    """The culprit the search named and stopped for."""
    confirmed: bool
    """Whether its trials bore it out (the revert fixed the bad end, the pick broke the good)."""


class SearchDoc(_Doc, AddedLater):
    """The posterior search (`search.flake` other than 0): how verdicts were weighed, and
    how sure the answer is."""

    added_later: ClassVar[tuple[str, ...]] = ("evidence", "looks", "known", "prior")

    flake: float | Literal["auto"]
    """The lie rate the search assumed; `auto`: learnt from the run's verdicts."""
    confidence: float
    """The posterior an answer needs."""
    max_probes: int
    """The probe budget."""
    posterior: float
    """The answer's posterior: the culprit's; the group's when ambiguous."""
    no_change: float
    """The posterior that nothing changed in the range (the bad end is good)."""
    credible: list[str]
    """The fewest commits holding the confidence as the first new-state one."""
    disagreed: list[Disagreed]
    """Each verdict that disagrees with the answer, in order."""
    again: list[str]
    """Commits probed more than once."""
    rates: Rates
    """The lie rates the verdicts point to (their posterior mean)."""
    probes: int
    """Probes the search spent."""
    settle: list[str] = Field(default_factory=list)
    """When ambiguous: the candidates probing next would tell most about."""
    evidence: list[TrialDoc] = Field(default_factory=list)
    """Confirmation trials weighed with the verdicts, like probes: the answer's own, which
    carry it to the confidence, and those of a culprit named earlier and not confirmed (its
    revert stayed bad), which lowered its posterior and sent the search on."""
    looks: list[LookDoc] = Field(default_factory=list)
    """The confirmations the search stopped for, in order: each culprit looked at and whether
    its trials bore it out (at most five a run, three a culprit)."""
    known: list[KnownDoc] = Field(default_factory=list)
    """Verdicts not run here (`candidates.known_verdicts`): weighed at their own lie rates
    from the first start; the culprit and its parent were probed here all the same."""
    prior: PriorDoc | None = None
    """The candidates' prior weights (`search.priors`); None where every one weighed alike."""


class LeftOut(_Doc):
    """`deps`: releases between the ends that the search left out, for one reason."""

    reason: Literal["yanked", "pre-release", "not installable"]
    """yanked (PEP 592; `--yanked` takes them in), pre-release (a, b, rc, dev; `--pre`), not
    installable (no file the engine's interpreter can install)."""
    versions: list[str]
    """Oldest first."""


class DepsDoc(_Doc):
    """`deps`: what was bisected: the releases of one dependency, installed over the engine
    held at one build (each release a commit of DIR/versions.git, made by llm-bisect)."""

    package: str
    """The dependency, as given (`--package`)."""
    engine: str = Field(pattern=r"^[0-9a-f]{40}$")
    """The engine's commit, held at every probe (`--build`, resolved)."""
    build: str
    """`--build` as given (a ref of the engine)."""
    route: str = ""
    """The engine's build route (wheel, overlay, command)."""
    good: str
    """The release that works (`--good`, as the index spells it)."""
    bad: str
    """The release that breaks (`--bad`)."""
    index: str = ""
    """`--index` (credentials left out); "": PyPI."""
    pre: bool = False
    yanked: bool = False
    last_good_version: str | None = None
    """The release before the first bad one among those bisected (the answer's last good)."""


class SymptomDoc(_Doc):
    """`search.symptom: same`: a candidate between the ends counted bad only with the bad
    end's symptom (symptom.py)."""

    rule: Literal["same"] = "same"
    bad_end: list[str]
    """The bad end's symptom: the checks it failed (`crash`: it crashed during its checks)."""
    counted_good: list[str] = Field(default_factory=list)
    """Commits that tested bad with another symptom only, counted good (their probes say so
    in `reason` and keep their failed checks)."""
    untold: list[str] = Field(default_factory=list)
    """Commits with a probe that could not tell (it stopped early, before the checks the bad
    end failed: a run under `any`, resumed), not counted: probed again where the search
    needed them."""


class ResultDocument(_Doc, AddedLater):
    """DIR/result.json."""

    added_later: ClassVar[tuple[str, ...]] = (
        "confirmation", "first_bad_version", "bumps", "later", "fast", "search", "left_out",
        "symptom", "reach", "deps", "decisive", "culprits", "together",
    )  # fmt: skip

    version: Literal[2] = RESULT_VERSION
    status: Status
    message: str
    mode: Mode
    regress: Regress = Regress.SEMANTIC
    good: str
    bad: str
    culprit: CandidateDoc | None
    range: list[str]
    """The last old-state commit, then every commit that could be the first new-state one."""
    fix_range: list[str] | None = None
    merge_base: str | None = None
    candidates: int
    fingerprints: Sides | None = None
    thresholds: dict[str, dict[str, Threshold]] = Field(default_factory=dict)
    """Per check, the thresholds it judged by and where each came from."""
    eval_power: Power | None = None
    warnings: list[str] = Field(default_factory=list)
    probes: list[ProbeDoc]
    parallel: int = 1
    """The most probes in flight at once (`parallel:`)."""
    rounds: int = 0
    """Rounds of probes, each started once the previous round's answers were in: one slot
    gives one per probe, k slots about log_(k+1) n."""
    narrowing: list[Step] = Field(default_factory=list)
    """The range probe by probe (a probe of the anchor, outside the sequence, has no step)."""
    sequence_length: int = 0
    """Commits in the plan's sequence, both ends (and a merge base) included."""
    context: Context = Field(default_factory=Context)
    started_at: float | None = None
    ended_at: float | None = None
    localization: LocalizationDoc | None = None
    """localization.json (localize.py), once the culprit was localised."""
    confirmation: Confirmation | None = None
    """The culprit reverted on the bad end and picked on the good end (services/confirm.py)."""
    culprits: list[CulpritDoc] = Field(default_factory=list)
    """Where the first culprit's revert left the bad end bad and the run went on
    (`search.culprits`): every culprit named, oldest first, `culprit` the first."""
    together: Together | None = None
    """The culprits confirmed as a whole: the bad end with all of them reverted."""
    bumps: list[BumpDoc] = Field(default_factory=list)
    """Dependency pins the culprit changes, from its diff (pins.py)."""
    reach: ReachDoc | None = None
    """Where the culprit lives: release tags and branches, cherry-picks included."""
    later: list[LaterDoc] = Field(default_factory=list)
    """`candidates.later`, each probed with the run's checks (services/later.py)."""
    first_bad_version: str | None = None
    """`deps`: the first bad release of the dependency (the culprit's version)."""
    left_out: list[LeftOut] = Field(default_factory=list)
    """`deps`: the releases in the range the search did not bisect, by why."""
    deps: DepsDoc | None = None
    """`deps`: the dependency, its ends and the engine build held."""
    fast: FastDoc | None = None
    """`probe.fast`: where the search ran, and whether the full setup agreed."""
    decisive: list[ProbeDoc] = Field(default_factory=list)
    """The last good and the first bad build probed again with every check, where the
    search's probe of them stopped at its first failed check (`probe.early_stop`): the
    culprit's evidence is read from these (services/stages.py)."""
    search: SearchDoc | None = None
    """The posterior search (`search.flake` other than 0): the rate, the confidence, the
    credible set and the verdicts that disagreed."""
    symptom: SymptomDoc | None = None
    """`search.symptom: same`: the bad end's symptom and the probes counted good for another
    (None: `any`, every bad probe counted bad)."""
    reversals: list[Reversal] = Field(default_factory=list)
    """Where the verdicts were not monotone (a good after a bad): the answer is then the
    last old→new step, the one the new end still has."""
    retests: list[Retest] = Field(default_factory=list)
    """Candidates probed again (a verdict that contradicted a neighbour's), and what each
    probe said."""
    notes: list[str] = Field(default_factory=list)
    """What a person must know to trust the answer, a sentence each: verdicts not monotone,
    flaky builds, a merge base that could not be tested and what that cost."""

    def probe_of(self, commit: str | None) -> ProbeDoc | None:
        """The latest probe of a commit that tested it (good or bad), else its latest (a
        commit probed again: its latest outcome counts)."""
        found = [p for p in self.probes if p.commit == commit]
        tested = [p for p in found if p.verdict in (Verdict.GOOD, Verdict.BAD)]
        return (tested or found)[-1] if found else None

    def evidence_of(self, commit: str | None) -> ProbeDoc | None:
        """A commit's probe that ran every check (`decisive`), else its probe_of."""
        full = [p for p in self.decisive if p.commit == commit]
        return full[-1] if full else self.probe_of(commit)


Decision = Literal["allow", "block", "inconclusive"]
GateReason = Literal["start-failure", "node", "flaky-start", "second-start-bad"]
"""Why a gate decided as it did when its candidate's checks did not decide: `start-failure`
(block: it never became ready, twice, where the golden's build does on the same launcher),
`node` (inconclusive: the golden's build does not start there either), `flaky-start`
(inconclusive: it became ready on its second start only, and its checks passed),
`second-start-bad` (block: its first start never became ready, its second tested bad)."""


class GoldenRef(_Doc):
    """The golden a gate compared with."""

    path: str
    commit: str
    recorded: bool = False
    """True when this gate recorded it (`--record`)."""


class Bisection(_Doc):
    """The bisection a blocked gate started (`--bisect-on-block`)."""

    out: str
    """Its folder: journal, result.json, report.md, report.html."""
    status: Status | None = None
    """None while it runs (a gate killed then resumes it)."""
    message: str = ""
    culprit: CandidateDoc | None = None
    probes: int = 0
    """Probes the bisection ran itself (the two verdicts the gate held are not counted)."""


class Trial(_Doc):
    """One more start a gate made because its candidate never became ready."""

    role: Literal["candidate", "golden-build"]
    """The candidate once more, or the golden's build on the same launcher (is it the node?)."""
    why: str
    probe: ProbeDoc
    """Its probe: the golden's build is waited on until ready, no checks run on it."""


class GateDocument(_Doc, AddedLater):
    """DIR/gate.json: one release candidate judged against the last good build's golden."""

    added_later: ClassVar[tuple[str, ...]] = (
        "eval_config",
        "eval_data",
        "reason",
        "trials",
        "eval_power",
    )

    version: Literal[1] = GATE_VERSION
    decision: Decision
    exit_code: int
    message: str
    candidate_ref: str
    candidate: CandidateDoc
    golden: GoldenRef
    probe: ProbeDoc
    warnings: list[str] = Field(default_factory=list)
    """Where the good build fails a rule itself (from its golden)."""
    context: Context = Field(default_factory=Context)
    eval_config: str = ""
    """The vLLM eval config `--eval-config` judged the candidate by (absolute); "": none."""
    eval_data: str = ""
    """Where its questions came from by `--eval-data` (absolute); "": the config's default."""
    config_digest: str = ""
    """What decides verdicts in the config (a resumed gate must have the same)."""
    started_at: float | None = None
    ended_at: float | None = None
    bisection: Bisection | None = None
    fingerprints: Sides | None = None
    """The golden's build (old) and the candidate's (new), when the golden keeps its build's
    fingerprint (goldens recorded before llm-bisect kept one do not)."""
    reason: GateReason | None = None
    """Why, when the candidate's checks did not decide (it never became ready)."""
    trials: list[Trial] = Field(default_factory=list)
    """The starts made after the candidate's probe never became ready, in order."""
    eval_power: Power | None = None
    """What the eval could detect (its n, the smallest detectable drop); None: no eval ran."""


def schemas() -> dict[str, dict[str, Any]]:
    """The published JSON Schemas, by document."""
    return {
        "result": ResultDocument.model_json_schema(),
        "gate": GateDocument.model_json_schema(),
    }
