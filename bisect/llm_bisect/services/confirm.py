"""Confirmation: is the culprit really it? (`confirm: true`, the default.)

After a run names a culprit C between the good end G and the bad end B:

    revert   B with C's change taken back   good → C explains the bad end
                                             bad  → not confirmed: another regression lies
                                                    between C and B
    pick     G with C's change made          bad  → C alone breaks the good end
                                             good → not confirmed: C breaks only with what
                                                    came between

Both are commits of the candidates repository (sources/picks.py), built and probed like
any other with the run's checks and golden. A revert or pick whose tree is one the run
probed already (B is C itself; G is C's parent) takes that probe's verdict, costing
nothing. A change that will not apply, a merge commit, or a build that cannot be tested
gives `cannot-confirm` with the reason, never a verdict.

The probes are journalled in DIR/confirm.jsonl: a run killed during confirmation resumes
without repeating one.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError
from ..journal import Journal, begin_side, look_digest, look_name, side_probes_apart
from ..model import Candidate, ProbeOutcome, Verdict
from ..places import place_key
from ..posterior import (
    MAX_LOOKS,
    REVERTS_GOOD,
    Policy,
    Trial as Weighed,
    next_look,
    revert_tally,
    reverts_hold,
)
from ..probe import Cancel, ProbeContext, probe
from ..redact import Scrub
from ..report.documents import (
    Confirmation,
    CulpritDoc,
    ResultDocument,
    Together,
    TrialDoc,
)
from ..runner import write_atomic
from ..search import Answer, Mode, Status, trial_slots
from ..sources.picks import Made, pick, revert, reverted_line, reverted_onto, tree_of

STORED = "confirmation.json"
WHAT = {
    "revert": "the bad end with it reverted",
    "pick": "the good end with it picked",
    "revert-again": "the bad end with it reverted, on a slot of its own",
}
VERSION = 1
T = TypeVar("T")


@dataclass(frozen=True)
class Trial:
    kind: str
    """`revert` (onto the bad end) or `pick` (onto the good end)."""
    onto: str
    commit: str | None
    verdict: Verdict | None
    reason: str
    reused: str | None = None
    """The probed commit whose tree this is (its verdict taken, no probe run)."""
    slot: int | None = None
    """The slot its server ran on (slot evidence); None where no probe ran."""
    began: float | None = None
    """When its probe started (wall clock)."""
    place: str = ""
    """The node and GPUs it ran on, as its fingerprint says (places.place_key)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "onto": self.onto,
            "commit": self.commit,
            "verdict": self.verdict.value if self.verdict else None,
            "reason": self.reason,
            "reused": self.reused,
        }
        if self.slot is not None:
            data["slot"] = self.slot
        if self.began is not None:
            data["began"] = self.began
        if self.place:
            data["place"] = self.place
        return data


def judge(revert_trial: Trial, pick_trial: Trial) -> tuple[str, str]:
    """(status, reason) from the two trials. Pure."""
    if revert_trial.verdict is None:
        return "cannot-confirm", revert_trial.reason
    if revert_trial.verdict is Verdict.BAD:
        return "not-confirmed", (
            f"reverting it does not fix the bad build ({revert_trial.onto[:12]}): another "
            "regression lies between the culprit and the bad end"
        )
    if pick_trial.verdict is None:
        return "confirmed", (
            f"by the revert alone: reverting it fixes the bad end (the pick: {pick_trial.reason})"
        )
    if revert_trial.reused and pick_trial.reused and pick_trial.verdict is Verdict.BAD:
        return "confirmed", (
            "by the run's own probes only: the bad end with it reverted is its parent's tree "
            f"({revert_trial.reused[:12]}, good) and the good end with it picked its own (bad); "
            "no build was added"
        )
    if pick_trial.verdict is Verdict.BAD:
        return "confirmed", "reverting it fixes the bad end; picking it onto the good end breaks it"
    return "not-confirmed", (
        "reverting it fixes the bad end, but picking it onto the good end does not break it: "
        "it breaks only together with what came between"
    )


@dataclass(frozen=True)
class Look:
    """Which of a run's confirmations this is, and where its trials run (confirm)."""

    look: int = 0
    slots: Sequence[int] = (0,)
    probe_new: bool = True
    avoid: Sequence[str] = ()
    reverts: int = 1
    """The starts its revert gets at once (posterior.reverts_at_once): a second one,
    `revert-again`, on a slot of its own beside the revert and the pick."""


def confirm(
    repo: Path,
    out_dir: Path,
    result: ResultDocument,
    ctx: ProbeContext,
    note: Callable[[str], None],
    scrub: Scrub,
    at: Look = Look(),
    now: Callable[[], float] = time.time,
) -> Confirmation | None:
    """The `confirmation` of result.json for a run that found its culprit; None otherwise.
    Of `at` (Look): `look`: which of the run's confirmations (0: the first; later ones run
    their trials on new starts, each journalled apart: confirm-again.jsonl,
    confirm-again-2.jsonl), where an earlier trial may have lied (the posterior search's next
    look).

    `slots`: where the trials may run, best first (trial_slots: never where the verdicts
    they check ran, where there is another). With two or more, the revert and the pick run
    at once, each on a slot of its own: one bad GPU or one burst of starts cannot give
    both. With one, the pick follows the revert, and only where the revert tested good.
    `avoid`: the nodes the verdicts they check ran on, which the trials keep off where the
    cluster picks the node (Slurm `--exclude`, Kubernetes anti-affinity: launchers.Avoids).
    `probe_new`: False for a look whose trials were weighed already (a resume, another
    `parallel`): only what its journal holds, no new start (its evidence stays as weighed).
    `reverts`: 2: the revert starts twice at once, each on a slot of its own (its second
    start journalled as `revert-again`), so one look can hold the REVERTS_GOOD reverts."""
    look, slots, probe_new, avoid = at.look, at.slots, at.probe_new, at.avoid
    if result.status is not Status.FOUND or result.culprit is None:
        return None
    if result.mode is not Mode.REGRESSION:
        return None
    culprit, good, bad = result.culprit.commit, result.good, result.bad
    probed: dict[str, tuple[str, Verdict, str]] = {}  # tree -> (commit, verdict, reason)
    for p in result.probes:
        tree = tree_of(repo, p.commit)
        if tree and Verdict(p.verdict) in (Verdict.GOOD, Verdict.BAD):
            probed[tree] = (p.commit, Verdict(p.verdict), p.reason)
    digest = look_digest(culprit, good, bad)
    path = out_dir / f"{look_name(look)}.jsonl"
    # another culprit's confirmation is dropped; the revert's second start kept apart
    done, again = side_probes_apart(path, digest, "revert-again")
    at_once = trials_at_once(slots)
    trials: dict[str, Trial] = {}
    wanted: list[tuple[str, str, Candidate]] = []  # (kind, onto, the commit made)
    for kind, onto in (("revert", bad), ("pick", good)):
        make = revert if kind == "revert" else pick
        try:
            made: Made = make(repo, culprit, onto)
        except ConfigError as exc:  # git itself failed: never an answer, never a crash
            made = Made(None, f"{kind} of {culprit[:12]} onto {onto[:12]}: {exc}")
        if made.commit is None:
            trials[kind] = Trial(kind, onto, None, None, made.reason)
            continue
        same = probed.get(tree_of(repo, made.commit))
        if same is not None:
            commit, verdict, reason = same
            trials[kind] = Trial(kind, onto, made.commit, verdict, reason, reused=commit)
            continue
        candidate = Candidate(made.commit, subject=f"{WHAT[kind]} ({culprit[:12]})")
        wanted.append((kind, onto, candidate))
        if kind == "revert" and at.reverts > 1 and at_once:
            wanted.append(("revert-again", onto, candidate))
    with Journal(path, scrub) as journal:
        begin_side(journal, "confirm", digest, VERSION)

        def run_one(kind: str, candidate: Candidate, slot: int, cancel: Cancel) -> ProbeOutcome:
            note(f"confirm: probing {WHAT[kind]} ({candidate.commit[:12]}) on slot {slot}")
            began = now()
            where = out_dir / look_name(look) / kind
            outcome = probe(candidate, where, ctx, cancel, slot=slot, avoid=avoid)
            return replace(outcome, slot=slot, began=began)

        def mine(kind: str) -> dict[str, ProbeOutcome]:
            return again if kind == "revert-again" else done

        def record(kind: str, onto: str, candidate: Candidate, outcome: ProbeOutcome) -> None:
            if candidate.commit not in mine(kind):
                journal.append("probe", kind=kind, outcome=outcome.to_json(),
                               slot=outcome.slot, began=outcome.began)  # fmt: skip
                mine(kind)[candidate.commit] = outcome
            trials[kind] = _trial(kind.removesuffix("-again"), onto, candidate.commit, outcome)

        for kind, onto, candidate in wanted:  # journalled already: taken as they were
            if candidate.commit in mine(kind):
                record(kind, onto, candidate, mine(kind)[candidate.commit])
        fresh = [w for w in wanted if w[2].commit not in mine(w[0])] if probe_new else []
        slot_of = trial_places([kind for kind, _, _ in wanted], slots)
        if at_once and len(fresh) > 1:
            # at once, each on a slot of its own; each journalled as it ends, and on Ctrl-C
            # or an error both are stopped at once (their servers with them)
            cancels = [Cancel() for _ in fresh]
            with ThreadPoolExecutor(max_workers=len(fresh), thread_name_prefix="trial") as pool:
                futures = {pool.submit(run_one, kind, c, slot_of[kind], cancels[j]):
                           (kind, onto, c) for j, (kind, onto, c) in enumerate(fresh)}  # fmt: skip
                try:
                    for future in as_completed(futures):
                        record(*futures[future], future.result())
                except BaseException:
                    for cancel in cancels:
                        cancel()
                    raise
        else:
            for kind, onto, candidate in fresh:
                first = trials.get("revert")
                if kind == "pick" and not at_once and (first is None or first.verdict
                                                       is not Verdict.GOOD):  # fmt: skip
                    continue  # not tried (below)
                slot = slot_of[kind] if at_once else slots[0]
                record(kind, onto, candidate, run_one(kind, candidate, slot, Cancel()))
    if trials["revert"].verdict is None and "revert-again" in trials:
        # a revert start that could not be tested: its second start is the look's revert
        trials["revert"], trials["revert-again"] = trials["revert-again"], trials["revert"]
    pick_trial = trials.get("pick")
    journalled = pick_trial is not None and pick_trial.commit in done
    judged = confirmation(trials["revert"], pick_trial, good, at_once or journalled, scrub,
                          trials.get("revert-again"))  # fmt: skip
    if reverted_onto(repo, bad) is None:
        note(f"confirm: {judged.status}: {judged.reason}")
    else:  # a line with the culprits before it reverted: its revert alone is not said to fix
        note(f"confirm: with the culprits before it reverted too: {judged.status}: "
             f"{judged.reason}")  # fmt: skip
    keep(out_dir, result, judged, scrub)
    return judged


def confirmation(
    revert_trial: Trial,
    pick_trial: Trial | None,
    good: str,
    tried: bool,
    scrub: Scrub | None = None,
    again: Trial | None = None,
) -> Confirmation:
    """A look's Confirmation from its trials (judge). `tried`: the pick was run whatever the
    revert said (at once beside it, or journalled already); else a pick after a revert that was
    not good is `not tried`, as is a pick that could not be made. `again`: the revert's second
    start (Look.reverts), a trial beside them: weighed and counted (posterior.reverts_hold),
    not judged. Pure."""
    if pick_trial is None or (not tried and revert_trial.verdict is not Verdict.GOOD):
        # a pick cannot change it, or this look was weighed without one
        was = "no verdict" if revert_trial.verdict is None else revert_trial.verdict.value
        why = "bad: not confirmed" if revert_trial.verdict is Verdict.BAD else was
        pick_trial = Trial("pick", good, None, None, f"not tried: the revert was {why}")
    if redundant(revert_trial.verdict, again.verdict if again is not None else None):
        again = None
    status, reason = judge(revert_trial, pick_trial)
    if status == "confirmed" and again is not None and again.verdict is Verdict.BAD:
        status = "not-confirmed"
        reason = ("its revert read good on one start and bad on the other, at once: a lie, or "
                  "another regression after it")  # fmt: skip
    said = {"status": status, "reason": reason,
            "probes": [t.to_json() for t in (revert_trial, pick_trial, again) if t]}  # fmt: skip
    return Confirmation.model_validate(scrub.doc(said) if scrub is not None else said)


def redundant(revert: Verdict | None, again: Verdict | None) -> bool:
    """Whether the revert's second start is left out of its look (not weighed, not counted):
    where both read bad. It is there for the second good revert a culprit needs; a second
    bad one weighs the culprit down twice where another regression after it makes every
    revert bad (bench_noise `two`, 4 slots: 11.7 % of runs without an answer and 74.9
    starts with it, 7.3 % and 55.6 before the second start). Pure."""
    return revert is Verdict.BAD and again is Verdict.BAD


def trial_places(kinds: Sequence[str], slots: Sequence[int]) -> dict[str, int]:
    """The slot of each of a look's trials (`kinds`: every trial it makes, journalled or not,
    in order; `slots`: best first): each kind its own, the same on a resume as on the look's
    first start, so a trial started again never lands where one of this look ran already
    (one bad GPU would give both). Pure.

    >>> trial_places(["revert", "revert-again", "pick"], [2, 3, 0, 1])
    {'revert': 2, 'revert-again': 3, 'pick': 0}
    """
    return {kind: slots[j % len(slots)] for j, kind in enumerate(kinds)}


def trials_at_once(slots: Sequence[int]) -> bool:
    """Whether a look's revert and pick run at once, each on a slot of its own (two slots or
    more: one bad GPU or one burst of starts cannot give both); else the pick follows the
    revert, and only where the revert tested good."""
    return len(slots) > 1


def _trial(kind: str, onto: str, commit: str, outcome: ProbeOutcome) -> Trial:
    slot, began = outcome.slot, outcome.began
    place = place_key(outcome.fingerprint.node, outcome.fingerprint.devices)
    if outcome.verdict in (Verdict.GOOD, Verdict.BAD):
        return Trial(kind, onto, commit, outcome.verdict, outcome.reason, slot=slot, began=began,
                     place=place)  # fmt: skip
    why = f"{WHAT[kind]} could not be tested ({outcome.verdict.value}): {outcome.reason}"
    return Trial(kind, onto, commit, None, why, slot=slot, began=began, place=place)


def placed(
    k: int, checked: Sequence[int | None], earlier: Sequence[Weighed], culprit: str
) -> tuple[int, ...]:
    """Where a look's trials run (trial_slots): away from the slots whose verdicts named the
    culprit (`checked`: the slots of its probes and its parent's, oldest first) and from those
    of its earlier looks' trials (a burst there would lie to every look). Pure."""
    looked = [t.slot for t in earlier if t.commit == culprit]
    return trial_slots(k, [*checked, *looked])


def keep(out_dir: Path, result: ResultDocument, found: Confirmation, scrub: Scrub) -> None:
    """DIR/confirmation.json: the confirmation of `result`'s culprit, as `report DIR` attaches
    it again (with_confirmation)."""
    assert result.culprit is not None
    said = found.model_dump(mode="json", exclude={"continued"})
    stored = {"culprit": result.culprit.commit, "good": result.good, "bad": result.bad,
              "confirmation": said}  # fmt: skip
    write_atomic(out_dir / STORED, json.dumps(scrub.doc(stored), indent=2) + "\n")


def with_confirmation(result: ResultDocument, out_dir: Path) -> ResultDocument:
    """result.json with what DIR/confirmation.json says of its culprit (`report DIR`)."""
    try:
        stored = json.loads((out_dir / STORED).read_text())
        found = Confirmation.model_validate(stored["confirmation"])
    except (OSError, ValueError, KeyError, TypeError):
        return result
    culprit = result.culprit.commit if result.culprit else None
    ends = (culprit, result.good, result.bad)
    if (
        not isinstance(stored, dict)
        or (stored.get("culprit"), stored.get("good"), stored.get("bad")) != ends
    ):
        return result
    return result.model_copy(update={"confirmation": found})


def continue_after(
    repo: Path,
    result: ResultDocument,
    sequence: Sequence[str],
    bisect: Callable[[str, str, int], ResultDocument],
    note: Callable[[str], None],
    culprits: int = 2,
) -> dict[str, Any]:
    """Several culprits (`search.culprits`, `confirm: continue`): the culprit's revert did not
    fix the bad end, so bisect what remains on the reverted line (each commit after the
    culprit, with it reverted); the next culprit, named by the commit of the history it
    stands for. `bisect(good, bad, n)` runs that bisection, which names at most n culprits
    (going on itself where n > 1), and returns its result; `culprits`: how many this run may
    name, its own included.

    The answer as the stage keeps it (DIR/continued.json): status, culprit, subject and
    message of the next, `culprits` (every one named, this one first) and `together` (the
    bad end with all of them reverted: the last bisection's revert trial)."""
    assert result.culprit is not None
    culprit = result.culprit.commit
    first = culprit_doc(repo, result)
    after = list(sequence[sequence.index(culprit) :]) if culprit in sequence else []
    line, why = reverted_line(repo, culprit, after)
    if not line:
        message = f"cannot continue: {why}"
        said = Together(status="cannot-confirm", reason=f"{message}; the run stops at "
                        f"{first.commit[:12]}")  # fmt: skip
        return {"status": "error", "culprit": None, "message": message,
                "culprits": [first.model_dump(mode="json")],
                "together": said.model_dump(mode="json")}  # fmt: skip
    note(f"confirm: bisecting the {len(line)} commits after {culprit[:12]}, with it reverted")
    found = bisect(line[0], line[-1], culprits - 1)
    status = found.status.value
    if found.culprit is None:
        said = Together(status="cannot-confirm", reason=f"the bisection after "
                        f"{first.commit[:12]} named no culprit: {found.message}")  # fmt: skip
        return {"status": status, "culprit": None, "message": found.message,
                "culprits": [first.model_dump(mode="json")],
                "together": said.model_dump(mode="json")}  # fmt: skip
    named = [
        c.model_copy(update={"reverted": [first.commit, *c.reverted], "bisection": where})
        for c in (found.culprits or [culprit_doc(repo, found)])
        for where in [f"{CONTINUED}/{c.bisection}"]
    ]
    together = found.together or together_of(repo, found, [first.commit, named[0].commit])
    original, subject = named[0].commit, named[0].subject
    return {
        "status": status,
        "culprit": original,
        "subject": subject,
        "message": f"{original[:12]} {subject}: the next regression (with {culprit[:12]} reverted)",
        "culprits": [c.model_dump(mode="json") for c in (first, *named)],
        "together": together.model_dump(mode="json"),
    }


CONTINUED = "continued"
"""The folder of DIR the bisection after a culprit writes to (its own DIR)."""


def original_of(repo: Path, commit: str) -> str:
    """The commit of the history a commit stands for: itself, or for a commit of a reverted
    line (of a line, ...), the one its Reverted-onto trailers lead to."""
    seen = {commit}
    while (onto := reverted_onto(repo, commit)) is not None and onto not in seen:
        commit = onto
        seen.add(commit)
    return commit


def culprit_doc(repo: Path, result: ResultDocument) -> CulpritDoc:
    """A bisection's culprit as one of several: the commit it stands for, its subject, the
    bisection's answer, its own and its parent's verdicts there."""
    assert result.culprit is not None
    named = result.culprit.commit
    commit = original_of(repo, named)
    subject = result.culprit.subject if commit == named else _subject_of(repo, commit)
    span = list(result.range)
    parent = span[span.index(named) - 1] if named in span[1:] else None
    return CulpritDoc(
        commit=commit, subject=subject, message=result.message,
        verdicts=[p.verdict for p in result.probes if p.commit == named],
        parent_verdicts=[p.verdict for p in result.probes if p.commit == parent],
    )  # fmt: skip


def together_of(repo: Path, result: ResultDocument, commits: Sequence[str]) -> Together:
    """The culprits `commits` as a whole, from the last bisection's confirmation (`result`,
    on the line with all but the last reverted): its revert is the bad end with them all
    reverted — good, they explain it; bad, another regression lies after them."""
    shown = ", ".join(c[:12] for c in commits)
    found = result.confirmation
    revert = next((p for p in found.probes if p.kind == "revert"), None) if found else None
    if revert is None:
        why = "the bisection after them confirmed nothing"
        return Together(status="cannot-confirm", reason=f"{why}: {result.message}")
    onto = original_of(repo, revert.onto)
    trial = revert.model_copy(update={"onto": onto})
    every = "both" if len(commits) == 2 else f"all {len(commits)}"
    everything = f"the bad end ({onto[:12]}) with {every} reverted ({shown})"
    if revert.verdict == "good":
        return Together(status="confirmed", reason=f"{everything} is good", trial=trial)
    if revert.verdict == "bad":
        why = (f"{everything} is still bad: another regression lies after them "
               f"(`search.culprits: {len(commits)}` names no more)")  # fmt: skip
        return Together(status="not-confirmed", reason=why, trial=trial)
    return Together(status="cannot-confirm", reason=revert.reason, trial=trial)


def _subject_of(repo: Path, commit: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%s", commit], capture_output=True, text=True
    )
    return done.stdout.strip()


def goes_on(result: ResultDocument, asked: bool = False) -> bool:
    """Whether a run names the culprit after this one (`search.culprits`): its revert left
    the bad end bad on verdicts the search believes (flake 0: every verdict; the posterior
    search: the culprit held, named again after its trials were weighed). `asked`
    (`confirm: continue`): wherever the revert was bad, as that always did. Pure."""
    found, culprit = result.confirmation, result.culprit
    if found is None or found.status != "not-confirmed" or culprit is None:
        return False
    revert = next((p for p in found.probes if p.kind == "revert"), None)
    return revert is not None and revert.verdict == "bad" and (asked or _held(result))


def _held(result: ResultDocument) -> bool:
    """The search named the same culprit again after weighing its trials (or weighed none)."""
    search, culprit = result.search, result.culprit
    if search is None or culprit is None:
        return True
    return not search.evidence or any(t.commit == culprit.commit for t in search.evidence)


def as_a_whole(answer: Answer, result: ResultDocument) -> tuple[Answer, ResultDocument]:
    """A run that went on after its culprit (`result.together`): `found` where several
    culprits are confirmed together (the bad end good with all of them reverted) and the
    first held (confirm.goes_on), naming each; otherwise as it was, with why they are not
    (a revert that does not apply: cannot confirm). Pure."""
    together, named = result.together, result.culprits
    if together is None:
        return answer, result
    shown = "; ".join(f"{c.commit[:12]} {c.subject}" for c in named)
    status = result.status
    if together.status == "confirmed" and len(named) > 1 and _held(result):
        message = f"{len(named)} culprits ({shown}), confirmed together: {together.reason}"
        status = Status.FOUND
    elif together.status == "cannot-confirm":
        message = f"{result.message}; cannot confirm the culprits ({shown}): {together.reason}"
    else:
        message = f"{result.message}; {len(named)} culprits named ({shown}), not confirmed " \
            f"together: {together.reason}"  # fmt: skip
    update = {"status": status, "message": message}
    return replace(answer, status=status, message=message), result.model_copy(update=update)


def looked(
    done: T,
    policy: Policy,
    answer_of: Callable[[T], Answer],
    look: Callable[[T, Policy, int], Confirmation | None],
    search: Callable[[Policy], T] | None,
    note: Callable[[str], None],
) -> tuple[T, Confirmation | None, Policy]:
    """The Confirm stage's looks at the run's culprit, until one stands: `look(done, policy,
    at)` runs confirmation number `at` (new starts where `at` is past the looks weighed);
    under the posterior search its trials are evidence like any probe: weighed, and
    `search(policy)` goes on where the posterior then points (where the search stopped for
    them, they carry its culprit to the confidence); a culprit it names after a look that
    was not borne out gets a look on new starts (posterior.next_look: at most five looks a
    run, three a culprit). `search` None, or verdicts taken as facts: one look. Returns the
    run as it ends, its last look (None: no culprit, or none looked at) and the policy the
    search ended with. The runner's search and the benches (scripts/bench_noise.py) both go
    through here."""
    while True:
        answer = answer_of(done)
        culprit = answer.culprit.commit if answer.culprit is not None else None
        if answer.status is not Status.FOUND or culprit is None:
            return done, None, policy  # no culprit: no confirmation of one
        if policy.exact or search is None:  # verdicts are facts: one look, as today
            return done, look(done, policy, 0), policy
        at, go_on = next_look(policy.looks, culprit, policy.evidence)
        found = None if at is None else look(done, policy, at)
        if found is None or not go_on:
            return done, _held_out(found, policy, culprit), policy
        if found.status == "cannot-confirm":  # no trial can run: none to weigh
            if policy.confirming:  # it stopped for them: it goes on to the confidence
                policy = replace(policy, confirming=False)
                done = search(policy)
                now = answer_of(done).culprit
                found = found if now is not None and now.commit == culprit else None
            return done, found, policy
        once = found.status == "confirmed"
        bore_out = once and _reverts_hold(found, policy, culprit)
        weighed = weigh(policy, found, culprit, confirmed=bore_out)
        if once and not bore_out:
            note("confirm: this look's trials agree; a culprit's revert must read good on "
                 f"{REVERTS_GOOD} starts, more than read bad, before it is confirmed (another "
                 "regression after it would read good on one lying start): a look on new "
                 "starts")  # fmt: skip
        elif not bore_out:
            note(f"confirm: not confirmed; {weighing(weighed, policy)}")
        done, policy = search(weighed), weighed


def _reverts_hold(found: Confirmation, policy: Policy, culprit: str) -> bool:
    """Whether the culprit's reverts, this look's and those weighed before, hold it
    (posterior.reverts_hold); verdicts taken as facts, or a revert whose tree the run
    probed already (nothing after the culprit: the bad end reverted is its parent), this
    look alone."""
    reused = any(t.kind == "revert" and t.reused is not None for t in found.probes)
    if policy.exact or reused:
        return found.status == "confirmed"
    return reverts_hold(_every_trial(found, policy, culprit), culprit)


def _every_trial(found: Confirmation, policy: Policy, culprit: str) -> list[Weighed]:
    """The trials weighed before and this look's, each once (a look given back as it was
    is among those weighed already)."""
    return list(dict.fromkeys([*policy.evidence, *weighed_trials(found, culprit)]))


def _held_out(found: Confirmation | None, policy: Policy, culprit: str) -> Confirmation | None:
    """The run's last look as it ends: a look that confirmed the culprit while its reverts do
    not hold it yet (no look left) is not said to confirm it."""
    if found is None or found.status != "confirmed" or _reverts_hold(found, policy, culprit):
        return found
    goods, bads = revert_tally(_every_trial(found, policy, culprit), culprit)
    why = (f"its revert read good on {goods} of {goods + bads} starts: not enough to rule out "
           "another regression after it, which a lying start would hide")  # fmt: skip
    return found.model_copy(update={"status": "not-confirmed", "reason": why})


def weighed_trials(found: Confirmation, culprit: str) -> tuple[Weighed, ...]:
    """A confirmation's trials that count as evidence: each that ran a probe of its own (a
    reused tree's verdict is one of the run's probes already)."""
    return tuple(
        Weighed(culprit, t.kind, Verdict(t.verdict), t.slot, t.began, t.place or "")
        for t in found.probes
        if t.verdict is not None and t.reused is None
    )


def weigh(policy: Policy, found: Confirmation, culprit: str, confirmed: bool = False) -> Policy:
    """The search policy with a confirmation's trials as evidence: each trial that ran a
    probe of its own (a reused tree's verdict is one of the run's probes already), the look
    recorded (`Policy.looks`: the search stops for a confirmation only of a culprit whose
    next look is weighed, and none once the looks are spent). Where a culprit was not
    confirmed and no trial ran a probe of its own, ten times the evidence instead (a verdict
    on the way may have lied)."""
    trials = weighed_trials(found, culprit)
    looks = (*policy.looks, (culprit, confirmed))
    policy = replace(policy, looks=looks, confirming=policy.confirming and len(looks) < MAX_LOOKS)
    if not trials:
        if confirmed:
            return policy
        return replace(policy, confidence=1 - (1 - policy.confidence) / 10)
    return replace(policy, evidence=(*policy.evidence, *trials))


def weighing(weighed: Policy, policy: Policy) -> str:
    """What the search does after a culprit was not confirmed, for a person."""
    if weighed.evidence == policy.evidence:
        return (
            f"probing on until the posterior reaches {weighed.confidence:g} "
            "(a verdict on the way may have lied)"
        )
    said = ", ".join(
        f"{t.kind} {t.verdict.value}" for t in weighed.evidence[len(policy.evidence) :]
    )
    return (
        f"its trials ({said}) are weighed as evidence and the search goes on where the "
        "posterior now points"
    )


def second_look(result: ResultDocument, evidence: Sequence[TrialDoc]) -> str:
    """Why a culprit not confirmed at first is confirmed now: a verdict on the way lied (the
    search moved to another culprit), or a first trial did (the culprit held and its trials
    on new starts agree), or its revert had read good on one start only (REVERTS_GOOD).
    `evidence`: the earlier looks' trials, weighed."""
    culprit = result.culprit.commit if result.culprit is not None else None
    others = [t for t in evidence if t.commit != culprit]
    mine = [(t.kind, t.verdict) for t in evidence if t.commit == culprit]
    if not others and mine and set(mine) <= {("revert", "good"), ("pick", "bad")}:
        return (
            f"its revert read good on {mine.count(('revert', 'good')) + 1} starts, on this look "
            f"and the one before (a culprit's revert must read good on {REVERTS_GOOD} starts: "
            "with another regression after it, one lying start would read good)"
        )
    first = (others or evidence)[-1].commit
    trials = ", ".join(f"{t.kind} {t.verdict}" for t in evidence if t.commit == first)
    bore_out = {(t.kind, t.verdict) for t in evidence if t.commit == first} == {
        ("revert", "good"),
        ("pick", "bad"),
    }
    if culprit != first and bore_out:
        return (
            f"{first[:12]} was named first and its trials agreed ({trials}), yet the probes "
            "that followed them point to this one: a verdict on the way was probably wrong"
        )
    if culprit != first:
        shown = "; ".join(
            f"{d.commit[:12]} was probed again: {', '.join(v.value for v in d.verdicts)}"
            for d in ({d.commit: d for d in result.search.disagreed}.values()
                      if result.search else ())
        )  # fmt: skip
        return (
            f"{first[:12]} was named first and not confirmed ({trials}): a verdict on the way "
            f"was probably wrong ({shown or 'its neighbours were probed again'})"
        )
    return (
        f"not confirmed at first ({trials}); its own verdicts held when probed again and the "
        "trials on new starts confirm it: a first trial was probably wrong"
    )


def unconfirmed(answer: Answer, result: ResultDocument) -> tuple[Answer, ResultDocument]:
    """A culprit its confirmation does not bear out under the posterior search, after its
    trials were weighed and the search went on: ambiguous, never `found` with exit 0 — as a
    run ends it and as `report DIR` rebuilds it. Unchanged where the culprit is confirmed or
    verdicts are facts (flake 0: today's `found`). The search named the same culprit again
    (`held`: its verdicts held): its revert stays bad (the evidence supports two steps), or
    its pick does not break the good end (it breaks only with what came between). Pure."""
    found, culprit, search = result.confirmation, result.culprit, result.search
    if found is None or found.status != "not-confirmed" or culprit is None or search is None:
        return answer, result
    held = _held(result)
    p = f" (posterior {search.posterior:.4f})"
    stays_bad = any(t.kind == "revert" and t.verdict == "bad" for t in found.probes)
    if not held:
        why = f"the search probed on and named another culprit{p}, which is not confirmed either"
    elif stays_bad:
        why = (
            f"another regression lies after it: the culprit's own verdicts held when probed "
            f"again{p}, so the evidence supports more than one step (`confirm: continue` "
            "bisects what remains)"
        )
    else:
        why = (
            f"the culprit's own verdicts held when probed again{p}: it is the first bad build, "
            "but not the whole cause (it breaks only together with what came before it)"
        )
    message = f"not confirmed: {found.reason}; {why}"
    update = {"status": Status.AMBIGUOUS, "message": message}
    return replace(answer, status=Status.AMBIGUOUS, message=message), result.model_copy(
        update=update
    )
