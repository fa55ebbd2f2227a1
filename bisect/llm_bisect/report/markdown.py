"""report.md: what a maintainer reads, and pastes into a GitHub issue. Pure: the typed
result.json (documents.ResultDocument) in, markdown out.

The first screen comes first (`first_screen`: the answer and how sure it is, the lies
assumed, the images, the dependency versions that changed, the backends, the first
divergence, each check's number, a doubted slot: docs/outputs.md), then the details, how to
reproduce it, the node, the evidence; long parts sit inside <details>. The first screen's
facts are built once (`screen`, as `Part`s a writer escapes) and written three ways:
report.md, report.html's top and the banner `run` ends with (`banner`). Every text from
outside (git, servers, logs, the config) passes through `escape` on its way in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .. import escape as esc
from ..checks.canary import CanaryDetails
from ..checks.eval import EvalDetails, replies_of
from ..checks.expect import ExpectDetails
from ..checks.gsm8k import DETECTABLE_WARN
from ..checks.lm_eval import LmEvalDetails
from ..checks.logprobs import Chosen, LogprobsDetails, TokensPart
from ..escape import cell
from ..fingerprint import NOT_COMPARED, Fingerprint, WeightsFacts
from ..kinds import showing
from ..localize import LocalizationDoc
from ..places import ASSUMED, ASSUMED_LINE, ONE_PLACE, doubted, one_place, started_where
from ..posterior import REVERTS_GOOD
from ..search import Mode, Status
from ..startup import PHASE_LABELS
from . import portable
from .documents import (
    Build,
    CandidateDoc,
    CheckDoc,
    Context,
    CulpritDoc,
    DepsDoc,
    LaterDoc,
    Power,
    PriorDoc,
    ProbeDoc,
    ResultDocument,
    Retest,
    Sides,
)
from .links import commit_url, compare_url, pr_number, pr_url


def _labels(doc: ResultDocument) -> tuple[str, str]:
    """What the two sides of the change are called: (old side, new side)."""
    return ("last good", "first bad") if doc.mode is Mode.REGRESSION else ("last bad", "first good")


def _sides(doc: ResultDocument) -> tuple[ProbeDoc, ProbeDoc] | None:
    """The probes either side of the change (old, new), when both ran."""
    if len(doc.range) < 2:
        return None
    old, new = doc.evidence_of(doc.range[0]), doc.evidence_of(doc.range[-1])
    return (old, new) if old is not None and new is not None else None


def bad_probe(doc: ResultDocument) -> ProbeDoc | None:
    """The bad side of the change's probe (every check's, where it was probed again in full):
    the first bad, or with --find-fix the last bad."""
    if len(doc.range) < 2:
        return None
    return doc.evidence_of(doc.range[-1] if doc.mode is Mode.REGRESSION else doc.range[0])


def _bad_side(doc: ResultDocument) -> tuple[ProbeDoc, ProbeDoc] | None:
    """(the bad side's probe, the good side's) either side of the change."""
    if _sides(doc) is None:
        return None
    bad = bad_probe(doc)
    good = doc.evidence_of(doc.range[0] if doc.mode is Mode.REGRESSION else doc.range[-1])
    return (bad, good) if bad is not None and good is not None else None


def _evidence(doc: ResultDocument) -> list[str]:
    """The bad side's failing checks next to the good side's output for the same check."""
    pair = _bad_side(doc)
    if pair is None:
        return []
    bad, good = pair
    old_label, new_label = _labels(doc)
    bad_label, good_label = (
        (new_label, old_label) if doc.mode is Mode.REGRESSION else (old_label, new_label)
    )
    return evidence(bad, good, bad_label, good_label)


def evidence(bad: ProbeDoc, good: ProbeDoc, bad_label: str, good_label: str) -> list[str]:
    """A bad probe's failing checks next to a good probe's output for the same check, both
    sides' figures (accuracy, content null, NaN/Inf) and the token-id / logprob diff (the
    section `## Evidence`; [] when no check failed)."""
    good_checks = {c.name: c for c in good.checks}
    lines: list[str] = []
    for check in (c for c in bad.checks if not c.passed):
        other = good_checks.get(check.name)
        lines += [
            f"### {esc.code(check.name)}",
            "",
            f"- **{bad_label}** `{bad.commit[:12]}`: {cell(check.evidence, 400)}",
            f"- **{good_label}** `{good.commit[:12]}`: "
            f"{cell(other.evidence if other else '(not run)', 400)}",
            "",
        ]
    figures = _figures(bad, good, bad_label, good_label)
    return ["## Evidence", "", *lines, *figures, *divergences(bad)] if lines else []


def _figures(bad: ProbeDoc, good: ProbeDoc, bad_label: str, good_label: str) -> list[str]:
    """Both sides' accuracy, answers with content null (against the golden's) and NaN/Inf
    logprobs, as maintainers ask for them; only where the eval ran (its counts recorded)."""
    rows: list[str] = []
    evals = [(label, p, _eval_of(p)) for label, p in ((bad_label, bad), (good_label, good))]
    if not any(ev is not None and ev.metrics is not None and ev.metrics.n for _, _, ev in evals):
        return []  # a result written before answers with content null were counted
    for label, p, ev in evals:
        if ev is None or ev.metrics is None:
            continue
        m = ev.metrics
        low, high = m.wilson95
        said = f"accuracy {m.accuracy:.1%} [{low:.1%}, {high:.1%}]"
        said += f" on {esc.text(ev.data)}" if ev.data else ""
        if m.n is not None and m.null_content is not None:
            said += f"; {replies_of(m.null_content, m.n)} with content null"
            if ev.golden_null_content is not None and ev.golden_n is not None:
                said += f"; golden {replies_of(ev.golden_null_content, ev.golden_n)}"
        rows.append(f"- **{label}** `{p.commit[:12]}`: {said}")
    for label, p in ((bad_label, bad), (good_label, good)):
        lp = _logprobs_of(p)
        if lp is not None:
            k = lp.metrics.non_finite or 0
            rows.append(
                f"- **{label}** `{p.commit[:12]}`: {k:,} logprob position(s) NaN or Inf "
                "(the golden's finite there)"
            )
    return ["#### Figures", "", *rows, ""] if rows else []


def _eval_of(p: ProbeDoc) -> EvalDetails | None:
    return next((c.details for c in p.checks if isinstance(c.details, EvalDetails)), None)


def _logprobs_of(p: ProbeDoc) -> LogprobsDetails | None:
    return next((c.details for c in p.checks if isinstance(c.details, LogprobsDetails)), None)


def _logprob(value: float | None, digits: int) -> str:
    return "NaN or inf" if value is None else f"{value:.{digits}f}"


def _side(token: Chosen) -> str:
    text = token.text
    shown = (
        f"{esc.code(token.token, table=True)} {cell(repr(text), 24)}"
        if text is not None
        else esc.code(token.token, table=True)
    )
    return f"{shown} ({_logprob(token.logprob, 3)})"


def _top(token: Chosen) -> str:
    """Each alternative's id, its text where the server gave one, and its logprob."""
    return ", ".join(
        esc.code(t.token, table=True)
        + (f" {cell(repr(t.text), 16)}" if t.text else "")
        + f" {_logprob(t.logprob, 2)}"
        for t in token.top
    )


def divergences(probe: ProbeDoc) -> list[str]:
    """Where the bad side's greedy tokens first part from the golden's, prompt by prompt."""
    rows = []
    for check in probe.checks:
        shown = check.name in showing("divergences")
        if not shown or not isinstance(check.details, LogprobsDetails):
            continue
        for case in check.details.cases:
            d = case.divergence
            teacher = f"{case.teacher_mean_abs_delta:.3f}"
            if d is None:  # no divergence, or one output ends where the other goes on
                first = case.first_divergence
                where, ended = ("—", "") if first is None else (first, "one output ends here")
                rows.append(
                    f"| {cell(repr(case.prompt), 40)} | {where} | — | — | {teacher} | {ended} |"
                )
                continue
            rows.append(
                f"| {cell(repr(case.prompt), 40)} | {d.position} "
                f"| {_side(d.golden)} | {_side(d.candidate)} | {teacher} "
                f"| golden: {_top(d.golden)}<br>now: {_top(d.candidate)} |"
            )
    if not rows:
        return []
    return [
        "#### First divergence from the golden (logprobs)",
        "",
        "| prompt | position | golden token (logprob) | now | teacher-forced mean abs Δ | top-k |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _caveats(doc: ResultDocument) -> list[str]:
    """What a person must know to trust the answer (verdicts not monotone, flaky builds, a
    merge base that could not be tested), and what each probe of a build probed again said."""
    notes = [*doc.notes, *doc.context.caveats]
    if not notes and not doc.retests:
        return []
    lines = ["## Caveats", "", *[f"- ⚠ {cell(note, 600)}" for note in notes]]
    if doc.retests:
        lines += ["", "Probed again:", ""]
        lines += [
            f"- `{r.commit[:12]}`: {', then '.join(_verdicts_where(doc, r))}"
            + (_flaky_said(doc) if r.flaky else "")
            for r in doc.retests
        ]
    return [*lines, ""]


def _verdicts_where(doc: ResultDocument, retest: Retest) -> list[str]:
    """Each verdict of a build probed again, with the node that gave it where its probes ran
    on more than one: a node whose verdicts disagree with the others' shows."""
    probes = [p for p in doc.probes if p.commit == retest.commit]
    nodes = [p.fingerprint.node for p in probes]
    if len(probes) != len(retest.verdicts) or not all(nodes) or len(set(nodes)) < 2:
        return [v.value for v in retest.verdicts]
    return [f"{p.verdict.value} (on {esc.text(p.fingerprint.node)})" for p in probes]


def _flaky_said(doc: ResultDocument) -> str:
    """What became of a build whose probes said good and bad."""
    if doc.search is not None:
        return " — the posterior weighs every probe"
    return " — flaky, counted unsure"


def _warnings(doc: ResultDocument) -> list[str]:
    if not doc.warnings:
        return []
    return ["## Warnings", "", *[f"- ⚠ {esc.text(w)}" for w in doc.warnings], ""]


_IDENTITY = (
    "image.id", "image.digest", "image.ref", "server.", "kernels.engine_version", "collect_env.vllm"
)  # fmt: skip
_HOW_MADE = (
    "build.seconds", "build.cached", "slurm.job", "slurm.queued_s", "slurm.start_s", "slurm.tries",
    "slurm.avoid", "slurm.avoided", "kubernetes.avoid", "kubernetes.avoided",
)  # fmt: skip
"""How long a build took, whether it was found made, a Slurm job's id and waits: they differ
between any two probes; the nodes a probe kept off (a re-probe's, a trial's): where, not
what."""
_WHOLE = ("image.id", "image.digest", "image.ref", "build.sha256", "build.base_id", "build.image")
"""Values shown whole, never cut: a digest cut short cannot be pulled."""


def _identity(key: str) -> bool:
    """Keys that differ between any two commits (ids, versions), so they do not stand out."""
    if key in _HOW_MADE or key.startswith(_IDENTITY):
        return True
    return key.startswith("image.labels.") and "commit" in key


def _fingerprints(doc: ResultDocument) -> list[str]:
    """The two builds either side of the change, side by side; differences marked."""
    if doc.fingerprints is None:
        return []
    return builds_compared(doc.fingerprints, *_labels(doc))


MODEL_FACTS = {
    "weights.revision": "weights' snapshot revision",
    "weights.model": "model the server loaded",
    "weights.tokenizer_revision": "tokenizer's snapshot revision",
    "server.chat_template": "chat template",
    "server.tokenizer": "tokenizer",
    "server.model": "served model name",
}
"""What the served model is, besides the engine: a difference is said on the first screen,
with each side's value."""


def builds_compared(sides: Sides, old_label: str, new_label: str) -> list[str]:
    """Two builds' fingerprints side by side (a collapsed section); differences marked."""
    old, new = sides.old, sides.new
    strip = ("commit", "verdict", *NOT_COMPARED)
    fo, fn = old.flat(*strip), new.flat(*strip)
    keys = sorted(fo.keys() | fn.keys(), key=lambda k: (k.startswith("image.labels"), k))
    if not keys:
        return []
    differ = set(sides.differences)

    def value(side: dict[str, str], key: str) -> str:
        text = side.get(key, "—")
        return esc.code(text, table=True) if key in _WHOLE else cell(text, 70)

    model_said = [
        f"⚠ The {what} differs between the {old_label} and {new_label} builds "
        f"({esc.code(key)}: {esc.code(cell_text(fo.get(key, '—')))} → "
        f"{esc.code(cell_text(fn.get(key, '—')))}): a change of the model's files "
        "(tokenizer_config.json, chat_template.jinja, a new snapshot) that no commit of the "
        "engine explains; compare "
        "them before blaming the commit."
        for key, what in MODEL_FACTS.items()
        if key in differ
    ]
    lines = [line for warning in model_said for line in (warning, "")]
    lines += [
        f"<details><summary><b>Builds compared</b> (the {old_label} and {new_label} builds' "
        f"fingerprints; {len([k for k in keys if k in differ])} differ)</summary>",
        "",
        f"| | {old_label} `{old.commit[:12]}` | {new_label} `{new.commit[:12]}` |",
        "|---|---|---|",
    ]
    for key in keys:
        mark = f"**⚠ {cell(key)}**" if key in differ else cell(key)
        lines.append(f"| {mark} | {value(fo, key)} | {value(fn, key)} |")
    changed = [k for k in keys if k in differ and not _identity(k)]
    if changed:
        lines += [
            "",
            "Changed besides the build's identity: " + ", ".join(esc.code(k) for k in changed),
        ]
    for label, side in ((old_label, fo), (new_label, fn)):  # never one rank's word for all
        for key in side.get("kernels.ranks_disagree", "").split(", "):
            if key:
                name = f"kernels.{key}"
                said = esc.text(side.get(name, ""))
                lines += ["", f"⚠ The {label} build's ranks disagree on {esc.code(name)}: {said}"]
    return [*lines, "", "</details>", ""]


def cell_text(value: object, limit: int = 70) -> str:
    """A value from outside cut to `limit` characters, for a code span."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _collect_env(doc: ResultDocument) -> list[str]:
    """What each side's own environment reported (vLLM's collect_env and nvidia-smi, where
    its server ran): the keys that changed, how many did not, and the raw outputs."""
    if doc.fingerprints is None:
        return []
    fp = doc.fingerprints
    old, new = fp.old.collect_env, fp.new.collect_env
    if not (old or new):
        return []
    keys = sorted(old.keys() | new.keys())
    changed = [k for k in keys if old.get(k) != new.get(k)]
    same = [k for k in keys if k not in changed]
    old_label, new_label = _labels(doc)
    a, b = fp.old.commit[:12], fp.new.commit[:12]
    lines = [
        "## Environment of each build (collect_env)",
        "",
        f"`python -m vllm.collect_env` and `nvidia-smi`, run where each server ran: "
        f"{len(changed)} changed, {len(same)} the same (in full: `probes/{a}/collect_env.txt`, "
        f"`probes/{b}/collect_env.txt` in the run's folder).",
        "",
    ]
    if changed:
        lines += [f"| | {old_label} `{a}` | {new_label} `{b}` |", "|---|---|---|"]
        for key in changed:
            lines.append(
                f"| **{cell(key)}** | {esc.code(cell_text(old.get(key, '—')), table=True)} "
                f"| {esc.code(cell_text(new.get(key, '—')), table=True)} |"
            )
        lines.append("")
    if same:
        shown = ", ".join(f"{cell(k)} {esc.code(cell_text(old[k]))}" for k in same)
        lines += [f"The same: {shown}", ""]
    return lines


def _power(doc: ResultDocument) -> list[str]:
    """How small an accuracy drop the eval could see; a warning when it is coarse."""
    return power_lines(doc.eval_power)


def power_lines(power: Power | None) -> list[str]:
    """How small an accuracy drop the eval could see (a run's, a gate's); a warning when it
    is coarse; nothing when no eval ran."""
    if power is None:
        return []
    drop, n = power.detectable_drop, power.n
    how = f"{power.test or 'one-sided'}, alpha {power.alpha}, power {power.power}"
    if power.tolerance:
        how += f", drops up to {power.tolerance:.1%} allowed"
    on = f" ({esc.text(power.data)})" if power.data else ""
    line = (
        f"The eval{on} detects, on its {n:,} answers compared, an accuracy drop of {drop:.1%} "
        f"or more from the golden's {power.golden_accuracy:.0%} ({how}; {power.assumption()})."
    )
    if drop > DETECTABLE_WARN:
        line = (
            f"⚠ {line} A smaller regression passes unseen: give the eval more problems "
            "(`path:` to a larger set, or a higher `limit`)."
        )
    return ["## Eval power", "", line, ""]


def _thresholds(doc: ResultDocument) -> list[str]:
    rows = [
        f"| {cell(check)} | {cell(key)} | {limit.value:.4g} | {cell(limit.source)} |"
        for check, values in doc.thresholds.items()
        for key, limit in values.items()
    ]
    if not rows:
        return []
    head = ["## Thresholds", "", "| check | limit | value | from |", "|---|---|---|---|"]
    return [*head, *rows, ""]


CURVE_ROWS = 12
"""Module outputs shown around the first divergence."""


def _nonfinite_line(
    found: LocalizationDoc, good_label: str = "last good", bad_label: str = "first bad"
) -> list[str]:
    """NaN or Inf on either path, where the worker extension counted them."""
    counts = found.nonfinite
    if counts is None:
        return []
    if not counts.good and not counts.bad:
        return ["No NaN or Inf on either path.", ""]
    first = f" (first: {cell(counts.first, 160)})" if counts.first else ""
    return [
        f"NaN or Inf in {counts.good} recorded tensors of the {good_label} build and "
        f"{counts.bad} of the {bad_label} build{first}.",
        "",
    ]


nonfinite_lines = _nonfinite_line
"""NaN or Inf on either path of a localisation, each side by its label."""


def _call_table(found: LocalizationDoc) -> list[str]:
    """The tensors of the call where the divergence shows: which matched, which differ."""
    call = found.call
    if call is None or not call.module:
        return []
    tolerance = found.tolerance or 0.0
    rows = [
        *[(f"input {esc.code(name, table=True)}", d) for name, d in call.inputs.items()],
        *[(esc.code(name, table=True), d) for name, d in call.outputs.items()],
    ]
    if not rows:
        return []

    def said(d: float) -> str:
        return "identical" if d == 0 else (f"{d:.3g}" if d > tolerance else f"{d:.3g} (within)")

    head = [
        f"| tensor of {esc.code(call.module, table=True)} | relative difference |",
        "|---|---|",
    ]
    return [*head, *[f"| {what} | {said(d)} |" for what, d in rows], ""]


call_table = _call_table
"""The tensors of the call where a localisation's divergence shows."""


def _localization(doc: ResultDocument) -> list[str]:
    """Where in the model the culprit's effect enters (the localisation probes)."""
    found = doc.localization
    if found is None:
        return []
    lines = ["## Where in the model", "", esc.text(found.line), ""]
    if found.error:
        return lines
    if found.why:
        lines += [f"({esc.text(found.why)})", ""]
    lines += _call_table(found)
    lines += _nonfinite_line(found)
    lines.append(
        f"Last good `{found.good[:12]}` and first bad `{found.bad[:12]}`, teacher-forced "
        f"on the same {found.tokens} tokens with the worker extension "
        f"({esc.text(' '.join(found.forced))}); "
        + ", ".join(
            [f"{esc.text(role)} {s:.0f}s" for role, s in found.seconds.items()]
            + [f"{esc.text(role)} captured before" for role in found.reused]
        )
        + "."
    )
    lines.append("")
    ranks = found.ranks
    rank = next((r for r in ranks if r.rank == found.rank), ranks[0] if ranks else None)
    curve = rank.curve if rank else []
    if curve:
        at = next((i for i, (_, d) in enumerate(curve) if d > (found.tolerance or 1.0)), 0)
        shown = curve[max(0, at - 3) : max(0, at - 3) + CURVE_ROWS]
        lines += ["| module output | relative difference |", "|---|---|"]
        lines += [f"| {esc.code(m, table=True)} | {d:.3g} |" for m, d in shown]
        lines.append("")
    return lines


def _bumps(doc: ResultDocument) -> list[str]:
    """The dependency pins the culprit changes, and the `deps` command that descends into
    each bump of an exact version (the engine held at the culprit's parent)."""
    if not doc.bumps or doc.culprit is None:
        return []
    lines = ["## Dependencies it bumps", ""]
    lines += [f"- {esc.code(b.label)} ({esc.text(', '.join(b.files))})" for b in doc.bumps]
    commands = []
    for b in doc.bumps:
        old, new = b.old.removeprefix("=="), b.new.removeprefix("==")
        if b.old.startswith("==") and b.new.startswith("==") and "," not in old + new:
            out = f"{doc.context.out or 'DIR'}-deps-{b.name}"  # one folder a bump
            argv = ["llm-bisect", "deps", doc.context.config or "CONFIG", "--build",
                    f"{doc.culprit.commit}^", "--package", b.name, "--good", old, "--bad", new,
                    "--out", out, *reproduce_repo(doc.context)]  # fmt: skip
            commands.append(esc.shell(argv))
    bad = bad_probe(doc)
    if commands and bad is not None and bad.fingerprint.image is not None:
        lines += [
            "",
            "`llm-bisect deps` finds the first bad release of each (the engine held at the "
            "culprit's parent) by installing each release into a folder of this machine, which "
            "a server in an image does not see: it takes a config with a process or Slurm "
            "server.",
        ]
    elif commands:
        lines += ["", "The first bad release of each, the engine held at the culprit's parent:", ""]
        lines += esc.fence("\n".join(commands), "bash")
    return [*lines, ""]


def _confidence(doc: ResultDocument) -> list[str]:
    """How the posterior search weighed verdicts and how sure the answer is."""
    found = doc.search
    if found is None:
        return []
    rate = "auto (learnt from this run)" if found.flake == "auto" else f"{found.flake:g}"
    lines = [
        "## Confidence",
        "",
        f"- posterior of the answer: {found.posterior:.4f} (needed: {found.confidence:g}); "
        f"no change in the range: {found.no_change:.4f}",
        f"- lie rate assumed: `search.flake: {rate}`; the verdicts point to a good build "
        f"reading bad {found.rates.false_bad:.3f} and a bad one reading good "
        f"{found.rates.false_good:.3f}",
        f"- probes: {found.probes} of at most {found.max_probes} (`search.max_probes`)",
        f"- credible set ({found.confidence:g}): "
        + ", ".join(
            [f"`{c[:12]}`" for c in found.credible]
            + (["no change in the range"] if found.no_change >= 1 - found.confidence else [])
        ),
    ]
    for commit in dict.fromkeys(d.commit for d in found.disagreed):
        said = [d for d in found.disagreed if d.commit == commit]
        where = started_where(doc.probes, commit, said[0].verdict)
        lines.append(
            f"- disagreed: `{commit[:12]}` tested {said[0].verdict.value} {len(said)} time(s) "
            f"(its probes: {', '.join(v.value for v in said[0].verdicts)})"
            + (f"; the doubted start: {esc.text(where)}" if where else "")
        )
    for trial in found.evidence:
        lines.append(
            f"- weighed as evidence: the {trial.kind} of `{trial.commit[:12]}` tested "
            f"{trial.verdict} (a confirmation trial, weighed like a probe)"
        )
    for known in found.known:
        lines.append(
            f"- verdict not run here: `{known.commit[:12]}` {known.verdict}, from "
            f"{esc.text(known.source, 200)} (weighed at a lie rate of {known.rate:g}; "
            "`candidates.known_verdicts`)"
        )
    if found.prior is not None:
        lines.append(prior_line(found.prior))
    for n, look in enumerate(found.looks, 1):
        outcome = (
            "bore it out"
            if look.confirmed
            else f"did not bear it out (yet: a revert must read good on {REVERTS_GOOD} starts)"
        )
        lines.append(
            f"- confirmation {n}: the search stopped for `{look.commit[:12]}`; its trials {outcome}"
        )
    for doubt in doubted(doc.probes):
        lines.append(f"- {esc.text(doubt.line)}")
    lines.append(f"- lies assumed: {ASSUMED}")
    if one_place(doc.probes):
        lines.append(f"- {ONE_PLACE}")
    if found.settle:
        lines += [
            "",
            "To settle it, raise `search.max_probes` (or lower `search.confidence`) and run the "
            "same command again: the run resumes from its journal and probes next "
            + ", ".join(f"`{c[:12]}`" for c in found.settle)
            + ".",
        ]
    return [*lines, ""]


def prior_line(prior: PriorDoc) -> str:
    """How much the prior moved the search: the weights, and what they put on the culprit."""
    low = len(prior.low)
    weight = f" ({min(prior.low.values()):g})" if prior.low else ""
    line = (
        f"- prior (`search.priors`): {low} of {prior.candidates} candidates weighed low{weight}, "
        "touching only files the good end's server never loaded, docs or tests"
    )
    if prior.culprit is not None and prior.uniform is not None:
        line += (
            f"; it put {prior.culprit:.0%} of the prior on the culprit (uniform: "
            f"{prior.uniform:.0%})"
        )
    return line


def _fast(doc: ResultDocument) -> list[str]:
    """`probe.fast`: where the search ran, and whether the full setup agreed."""
    fast = doc.fast
    if fast is None:
        return []
    lines = ["## Fast probes", "", esc.text(fast.line), ""]
    if fast.reproduced:
        lines += [
            "The full setup probed the fast answer first; the verdicts above are the full "
            "setup's. The fast search, with its own golden: `fast/report.md`.",
            "",
        ]
    return lines


def _culprits(doc: ResultDocument) -> list[str]:
    """Several culprits (`search.culprits`): each, oldest first, with how it was named, and
    the bad end with all of them reverted (what confirms them, only as a whole)."""
    together = doc.together
    if len(doc.culprits) < 2 or together is None:
        return []
    said = {"confirmed": "confirmed together", "not-confirmed": "not confirmed together",
            "cannot-confirm": "cannot confirm them together"}[together.status]  # fmt: skip
    lines = [f"## Culprits: {len(doc.culprits)} regressions in the range", "",
             f"**{said}**: {esc.text(together.reason)}", ""]  # fmt: skip
    for n, c in enumerate(doc.culprits, 1):
        own = ", ".join(v.value for v in c.verdicts) or "no probe"
        parent = ", ".join(v.value for v in c.parent_verdicts) or "no probe"
        how = (
            "with " + ", ".join(esc.code(r[:12]) for r in c.reverted) + " reverted on each probe"
            if c.reverted
            else "by the run's search"
        )
        lines.append(
            f"{n}. `{c.commit}` {esc.text(c.subject)} — named {how} ({esc.code(c.bisection)}): "
            f"its probes {own}, its parent's {parent}; {esc.text(c.message)}"
        )
    trial = together.trial
    if trial is not None:
        made = esc.code(trial.commit[:12]) if trial.commit else "(not made)"
        lines += ["", f"- the bad end ({esc.code(trial.onto[:12])}) with all of them reverted: "
                  f"{made}: {trial.verdict or 'no verdict'}; {esc.text(trial.reason)}"]  # fmt: skip
    return [*lines, ""]


def _confirmation(doc: ResultDocument) -> list[str]:
    """Is it really that one: the culprit reverted on the bad end, picked on the good."""
    found = doc.confirmation
    if found is None:
        return []
    lines = ["## Confirmation", "", f"**{esc.text(found.status)}**: {esc.text(found.reason)}", ""]
    for p in found.probes:
        what = (
            "the bad end with it reverted" if p.kind == "revert" else "the good end with it picked"
        )
        made = esc.code(p.commit[:12]) if p.commit else "(not made)"
        verdict = p.verdict or "no verdict"
        taken = f", the tree of {esc.code(p.reused[:12])} (its probe)" if p.reused else ""
        lines.append(f"- {what} ({esc.code(p.onto[:12])}): {made}{taken}: {verdict}; "
                     f"{esc.text(p.reason)}")  # fmt: skip
    if found.continued:
        lines += [
            "",
            f"Bisected on the reverted line: {esc.text(found.continued.get('message', ''))}",
        ]
    again = run_again(doc)
    if again is not None:
        lines += [
            "",
            "To bisect what remains (each commit after the culprit, with it reverted), set "
            "`confirm: continue` in the config and run the same command again; it resumes "
            "from the run's journal, no probe repeated:",
            "",
            *esc.fence(esc.shell(again), "bash"),
        ]
    return [*lines, ""]


def run_again(doc: ResultDocument) -> list[str] | None:
    """The command that resumes this run, when its culprit's revert did not fix the bad end
    and what remains was not bisected (`confirm: continue` not set); None otherwise."""
    found = doc.confirmation
    if found is None or found.status != "not-confirmed" or found.continued:
        return None
    revert = next((p for p in found.probes if p.kind == "revert"), None)
    if revert is None or revert.verdict != "bad":
        return None
    ctx = doc.context
    ends = [*(["--good", ctx.good_ref] if ctx.good_ref else []),
            *(["--bad", ctx.bad_ref] if ctx.bad_ref else [])]  # fmt: skip
    return ["llm-bisect", "run", ctx.config or "CONFIG", *ends, "--out", ctx.out or "DIR",
            *reproduce_repo(ctx)]  # fmt: skip


def later_said(x: LaterDoc) -> str:
    """What a later build says of the regression: good again, still bad, could not be
    tested; or that it never had the culprit, whatever it read."""
    tested = x.verdict.value in ("good", "bad")
    if not x.contains:
        read = f"tested {x.verdict.value}" if tested else f"not tested ({x.verdict.value})"
        return f"does not contain the culprit ({read}; never had it: no fix to find)"
    return {"good": "good again", "bad": "still bad"}.get(
        x.verdict.value, f"could not be tested ({x.verdict.value})"
    )


def good_again(doc: ResultDocument) -> LaterDoc | None:
    """The newest later build that has the culprit and is good again (the last such: `later`
    is oldest first)."""
    fixed = [x for x in doc.later if x.verdict.value == "good" and x.contains]
    return fixed[-1] if fixed and doc.mode is Mode.REGRESSION else None


def fix_command(doc: ResultDocument) -> list[str] | None:
    """The `--find-fix` run from the bad end to the newest later build that is good again;
    None when none is."""
    fixed = good_again(doc)
    if fixed is None:
        return None
    ctx = doc.context
    return ["llm-bisect", "run", ctx.config or "CONFIG", "--find-fix", "--good", fixed.commit,
            "--bad", doc.bad, "--out", (ctx.out or "DIR") + "-fix",
            *reproduce_repo(ctx)]  # fmt: skip


def _later(doc: ResultDocument) -> list[str]:
    """Where the regression ends: each build newer than the bad end, and the command that
    finds the fix when one of them is good again."""
    if not doc.later:
        return []
    lines = [
        "## Where it ends",
        "",
        f"Builds newer than the bad end `{doc.bad[:12]}` (`candidates.later`), probed with the "
        "run's checks and golden:",
        "",
    ]
    for x in doc.later:
        why = f": {cell(x.reason, 300)}" if x.reason else ""
        lines.append(f"- {esc.code(x.ref)} (`{x.commit[:12]}`): **{later_said(x)}**{why}")
    fix, fixed = fix_command(doc), good_again(doc)
    if fix is not None and fixed is not None:
        lines += [
            "",
            f"The fix lies between the bad end `{doc.bad[:12]}` and `{fixed.commit[:12]}`; "
            "find it with:",
            "",
            *esc.fence(esc.shell(fix), "bash"),
        ]
    elif any(x.verdict.value == "bad" and x.contains for x in doc.later):
        lines += ["", "No later build tested is good again: the regression has not ended."]
    elif not any(x.contains for x in doc.later):
        culprit = f" `{doc.culprit.commit[:12]}`" if doc.culprit else ""
        lines += ["", f"No later build tested contains the culprit{culprit} (each is on "
                      "another line than the bad end): none bounds a fix. A later build of the "
                      "bad end's own line would."]  # fmt: skip
    return [*lines, ""]


def duration(seconds: float | None) -> str:
    """`1h 02m`, `12m 30s`, `8.4s`."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s"


def _ref(given: str, commit: str) -> str:
    """The end as the user named it, with its commit when that says more."""
    if not given or commit.startswith(given):
        return f"`{commit[:12]}`"
    return f"{esc.code(given)} (`{commit[:12]}`)"


def _linked(base: str, c: CandidateDoc) -> str:
    """A commit with its subject, links to it and to its PR when the subject names one."""
    url = commit_url(base, c.commit)
    sha = f"[`{c.commit[:12]}`]({url})" if url else f"`{c.commit[:12]}`"
    pr = pr_number(c.subject)
    pr_href = pr_url(base, pr) if pr is not None else ""
    pr_link = f" ([#{pr}]({pr_href}))" if pr_href else ""
    return f"{sha} {cell(c.subject, 100)}{pr_link}"


def sureness(doc: ResultDocument) -> str:
    """How sure the answer is, in a few words (the posterior search; "" with flake 0)."""
    found = doc.search
    if found is None:
        return ""
    said = f"posterior {found.posterior:.3f}"
    if found.disagreed:
        again = set(found.again)
        probed = all(d.commit in again for d in found.disagreed)
        n = len(found.disagreed)
        said += f"; {n} verdict{'s' if n != 1 else ''} disagreed"
        if probed:
            said += f" and {'were' if n != 1 else 'was'} probed again"
        elif found.evidence:
            said += ", outweighed with the confirmation's trials"
    return said


def _release(doc: ResultDocument) -> str:
    """`deps`: the first bad release, and the answer's last good one."""
    d = doc.deps
    assert d is not None and doc.first_bad_version is not None
    last = f" (last good {esc.code(d.last_good_version)})" if d.last_good_version else ""
    return f"{esc.code(f'{d.package} {doc.first_bad_version}')}{last}"


def _engine(d: DepsDoc) -> str:
    """`deps`: the engine build every release was installed over."""
    given = "" if d.engine.startswith(d.build) else f" ({esc.code(d.build)})"
    route = f", built by {esc.code(d.route)}" if d.route else ""
    return f"the engine held at `{d.engine[:12]}`{given}{route}"


def _reproduce(doc: ResultDocument) -> list[str]:
    """The commands that show the change again, as printed from any folder (the config, the
    golden and a `--repo` by absolute path): a `check` of each side, and the server command
    line (or `docker run`) the bad side ran with, its environment's values included."""
    pair = _bad_side(doc)
    if pair is None or doc.status is not Status.FOUND:
        return []
    bad, good = pair
    ctx = doc.context
    check = ["llm-bisect", "check", ctx.config or "CONFIG", "--candidate"]
    named = [*(["--golden", ctx.golden] if ctx.golden else []), *reproduce_repo(ctx)]
    bad_word = "bad" if doc.mode is Mode.REGRESSION else "bad (the build before the fix)"
    commands = [
        f"{esc.shell([*check, bad.commit, *named])}   # expect {bad_word}: exit 1",
        f"{esc.shell([*check, good.commit, *named])}   # expect good: exit 0",
    ]
    lines = ["## Reproduce", "", *esc.fence("\n".join(commands), "bash"), ""]
    if doc.deps is not None:
        lines = _deps_reproduce(doc)
    command = bad.fingerprint.command
    if command:
        lines += [
            f"The server of `{bad.commit[:12]}` ran as (a secret by its name only: the line "
            "takes its value from your environment; `{port}` was a free port):",
            "",
            *esc.fence(command, "bash"),
            "",
        ]
    return lines


def _away(doc: ResultDocument) -> list[str]:
    """The same, away from this machine, for an issue that stands alone: the `check` lines
    by the attachments' names (the config embedded, secrets masked; the golden attached), the
    first bad build's `docker run` by digest and a `curl` of the canary's first failing
    prompt, which show the symptom without llm-bisect."""
    pair = _bad_side(doc)
    if pair is None or doc.status is not Status.FOUND or doc.deps is not None:
        return []
    bad, good = pair
    ctx = doc.context
    bad_word = "bad" if doc.mode is Mode.REGRESSION else "bad (the build before the fix)"
    lines = [
        esc.shell(portable.check_argv(ctx, bad.commit)) + f"   # expect {bad_word}: exit 1",
        esc.shell(portable.check_argv(ctx, good.commit)) + "   # expect good: exit 0",
    ]
    return away(ctx, lines, "run", [*_without_llm_bisect(bad)])


def away(
    ctx: Context,
    commands: list[str],
    what: str,
    after: list[str],
    files: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """`### Away from this machine`: what to attach to an issue (the golden, `files` as
    (name, path here), the config, which the folded block below holds), and `commands` (by
    those names) that run as printed in the folder that holds them, after a clone of the
    repository; then `after`."""
    clone = portable.clone_argv(ctx)
    folder = portable.clone_folder(ctx)
    attached = [f"{esc.code(name)} ({esc.code(here)} here)" for name, here in files]
    if ctx.golden:
        attached.insert(0, f"{esc.code(portable.GOLDEN)} (the golden the {what} judged by, "
                           f"{esc.code(ctx.golden)} here)")  # fmt: skip
    attach = f"attach {', '.join(attached)} and " if attached else ""
    config = (
        "the config below"
        if ctx.config_text
        else f"the {what}'s config ({esc.code(ctx.config or 'CONFIG')} here)"
    )
    said = [
        "### Away from this machine",
        "",
        f"For an issue: {attach}save {config} as {esc.code(portable.CONFIG)}; in the folder "
        f"that holds them, with a clone of the repository as {esc.code(folder)}, these lines "
        "run as printed:",
        "",
        *esc.fence("\n".join([*([esc.shell(clone)] if clone else []), *commands]), "sh"),
        "",
    ]
    if ctx.config_text:
        said += [
            f"<details><summary><b>{portable.CONFIG}</b> (the {what}'s config; a secret "
            "variable by its name, which takes your own; any other secret masked)</summary>",
            "",
            *esc.fence(ctx.config_text, "yaml"),
            "",
            "</details>",
            "",
        ]
    return [*said, *after]


def _without_llm_bisect(bad: ProbeDoc) -> list[str]:
    return without_llm_bisect(bad)


def without_llm_bisect(
    bad: ProbeDoc, label: str = "first bad build", *, command_above: bool = True
) -> list[str]:
    """A bad build's server by its image digest (docker), and the canary's first failing
    prompt sent to its OpenAI endpoint as the canary sent it (with the server's API key
    from the reader's environment, by its name, where the server asks for one).
    `command_above`: the report printed the server's command line above (Reproduce); else,
    with no image to run, the curl's block starts with it."""
    fp = bad.fingerprint
    pinned = portable.pinned_run(fp)
    failing = portable.failing_canary(bad)
    curl = None
    if failing is not None and fp.endpoint:
        case, details = failing
        curl = portable.curl_line(fp, portable.chat_body(fp, case, details))
    if pinned is None and curl is None:
        return []
    short = f"`{bad.commit[:12]}`"
    lines, block = ["#### Without llm-bisect", ""], []
    if pinned is not None and pinned.by_id:
        lines.append(
            f"The server of {short} by its image id {esc.code(pinned.name)}: the image has no "
            "registry digest (built or tagged on this machine, never pulled or pushed), so the "
            "id names it on this Docker engine only; push it to share it."
        )
    elif pinned is not None:
        lines.append(f"The server of {short} by its image digest {esc.code(pinned.name)}.")
    if pinned is not None:
        block.append(pinned.line)
    if curl is not None and failing is not None:
        case = failing[0]
        started = ""
        if pinned is None and fp.command and not command_above:
            block.append(fp.command)
            started = " (started by the block's first line: a secret by its name only, which "
            started += "takes its value from your environment)"
        elif pinned is None and fp.command:
            started = " (started by its command line above)"
        where = "once it is ready, " if block else ""
        lines.append(
            f"The canary's first failing prompt, {where}sent as the canary sent it to the "
            f"{label}'s server{started}:"
        )
        problem = case.problems[0] if case.problems else "failed"
        said = [f"{bad.commit[:12]}: {problem}"]
        if case.golden is not None:
            good = case.golden.content if case.golden.content is not None else "content null"
            said.append(f"the golden's answer (the good build): {good}")
        block += [esc.comment(cell_text(" ".join(x.split()), 300)) for x in said]
        block.append(curl)
    return [*lines, "", *esc.fence("\n".join(block), "sh"), ""]


def _deps_reproduce(doc: ResultDocument) -> list[str]:
    """`deps`: its releases are commits of a repository the run made, which `check` does not
    know: the same descent over the answer's last good and first bad release reproduces it
    (a fresh --out: two probes, its own golden)."""
    d, first_bad = doc.deps, doc.first_bad_version
    if d is None or first_bad is None or d.last_good_version is None:
        return []
    ctx = doc.context
    argv = ["llm-bisect", "deps", ctx.config or "CONFIG", "--build", d.engine, "--package",
            d.package, "--good", d.last_good_version, "--bad", first_bad,
            *(["--index", d.index] if d.index else []), *(["--pre"] if d.pre else []),
            *(["--yanked"] if d.yanked else []), "--out", (ctx.out or "DIR") + "-reproduce",
            *reproduce_repo(ctx)]  # fmt: skip
    said = f"# expect found, first bad {d.package} {first_bad}: exit 0"
    line = f"{esc.shell(argv)}   {said}"
    return [
        "## Reproduce",
        "",
        f"The last good and the first bad release over the same engine build (`{d.engine[:12]}`):",
        "",
        *esc.fence(line, "bash"),
        "",
    ]


def reproduce_repo(ctx: Context) -> list[str]:
    """`--repo PATH` when the run was given its clone so, for the reproduce commands."""
    return ["--repo", ctx.repo] if ctx.repo else []


def environment_lines(ctx: Context) -> list[str]:
    """The node's GPUs, driver and CUDA (or why they are unknown), OS, Python, llm-bisect."""
    env = ctx.environment
    if not env:
        return []
    lines = ["## Environment", ""]
    gpus = env.get("gpus") or []
    if gpus:
        names: dict[str, int] = {}
        for g in gpus:
            label = f"{g.get('name', '?')} ({g.get('memory.total', '?')})"
            names[label] = names.get(label, 0) + 1
        shown = ", ".join(f"{n} x {label}" for label, n in names.items())
        lines.append(f"- GPUs: {esc.text(shown)}")
        driver = f"driver {env.get('driver') or '?'}, CUDA {env.get('cuda') or '?'}"
        lines.append(f"- {esc.text(driver)}")
    else:
        lines.append(f"- GPUs: {esc.text(env.get('gpu_note', 'unknown'))}")
    node = (
        f"{env.get('os', '?')}, Python {env.get('python', '?')}, "
        f"llm-bisect {env.get('llm_bisect', '?')}"
    )
    lines.append(f"- {esc.text(node)}")
    return [*lines, ""]


def _cache_state(fingerprint: Fingerprint) -> str:
    """A probe's engine cache as its table cell: `hit (12 held)`; "" where not counted."""
    cache = fingerprint.engine_cache
    if cache is None or not cache.state:
        return ""
    fresh = ", a fresh folder: a re-probe" if cache.fresh else ""
    return f"{cache.state}{fresh} ({cache.held} held, {cache.written} written)"


def _probes(doc: ResultDocument) -> list[str]:
    nodes = any(p.fingerprint.node for p in doc.probes)  # where each ran, where recorded
    caches = any(_cache_state(p.fingerprint) for p in doc.probes)
    full = {p.commit for p in doc.decisive}
    lines = [
        f"<details><summary><b>Probes</b> ({len(doc.probes)})</summary>",
        "",
        "| # | commit | subject | verdict | reason | seconds |"
        + (" node |" if nodes else "")
        + (" engine cache |" if caches else ""),
        "|---|--------|---------|---------|--------|---------|"
        + ("------|" if nodes else "")
        + ("------|" if caches else ""),
    ]
    for i, p in enumerate(doc.probes, 1):
        seconds = p.timings.get("total")
        shown = "" if seconds is None else f"{seconds:.1f}"
        reason = f"{p.reason} (given by {p.given})" if p.given else p.reason
        again = "; every check run after the search: see Evidence" if p.commit in full else ""
        settled = (
            f" (not run, the verdict settled: {', '.join(p.not_run)}{again})" if p.not_run else ""
        )
        node = f" {cell(p.fingerprint.node, 40)} |" if nodes else ""
        cache = f" {esc.text(_cache_state(p.fingerprint))} |" if caches else ""
        lines.append(
            f"| {i} | `{p.commit[:12]}` | {cell(p.subject, 60)} "
            f"| {p.verdict.value} | {cell(reason)}{esc.text(settled)} | {shown} |{node}{cache}"
        )
    lines += ["", "</details>", ""]
    if caches:
        lines += [
            "Engine cache: what each probe's compile-cache folder (its node's and slot's) held "
            "when its server was ready — `cold`: nothing from before its start; `hit`: files "
            "from before, none written since; `warm`: files from before and new ones (another "
            "build's entries, or parts compiled anew); a re-probe starts in a fresh, empty folder "
            "of its own. Files counted by their times (result.json `engine_cache`).",
            "",
        ]
    lines += [*_startups(doc)]
    skipped = [p for p in doc.probes if p.verdict.value == "skip" and p.log_tail]
    if skipped:
        lines += ["## Untestable builds", ""]
        for p in skipped:
            lines += [
                f"<details><summary><code>{p.commit[:12]}</code>: "
                f"{esc.summary(p.reason, 200)}</summary>",
                "",
                *esc.fence(p.log_tail),
                "",
                "</details>",
                "",
            ]
    return lines


def _startups(doc: ResultDocument) -> list[str]:
    """Where each probe's wait until ready went, in seconds per phase its server's log names."""
    started = [(i, p, p.startup) for i, p in enumerate(doc.probes, 1) if p.startup]
    seen = {s.name for _, _, startup in started for s in startup.phases}
    names = [n for n in PHASE_LABELS if n in seen]
    if not names:
        return []
    lines = [
        f"<details><summary><b>Server starts</b>, seconds per phase ({len(started)})</summary>",
        "",
        "| # | commit | " + " | ".join(names) + " | compile cache |",
        "|---|--------|" + "---|" * len(names) + "---|",
    ]
    for i, p, startup in started:
        took = {s.name: s.end - s.start for s in startup.phases}
        cells = " | ".join(f"{took[n]:.0f}" if n in took else "" for n in names)
        lines.append(f"| {i} | `{p.commit[:12]}` | {cells} | {startup.compile_cache} |")
    return [*lines, "", "</details>", ""]


def _releases(doc: ResultDocument) -> list[str]:
    """`deps`: the first bad release, and the releases between the ends it left out."""
    first_bad = doc.first_bad_version
    lines = [f"- first bad version: {esc.code(first_bad)}"] if first_bad else []
    asks = {"yanked": " (`--yanked` takes them in)", "pre-release": " (`--pre` takes them in)"}
    for gone in doc.left_out:
        shown = ", ".join(esc.code(v) for v in gone.versions[:20])
        more = ", ..." if len(gone.versions) > 20 else ""
        lines.append(
            f"- left out, {gone.reason}: {len(gone.versions)} release(s): {shown}{more}"
            + asks.get(gone.reason, "")
        )
    return lines


def _symptom(doc: ResultDocument) -> list[str]:
    """`search.symptom: same`: the bad end's symptom, and the builds counted good for another."""
    rule = doc.symptom
    if rule is None:
        return []
    crashed = "crash" in rule.bad_end
    names = ", ".join(esc.code(n) for n in rule.bad_end) or "nothing"
    end = "crashed" if crashed else f"failed {names}"
    lines = [
        f"- which bad probes count: `search.symptom: same`, only the bad end's symptom (it {end})"
    ]
    if rule.counted_good:
        shown = ", ".join(f"`{c[:12]}`" for c in rule.counted_good)
        lines.append(f"- counted good, bad with another symptom only: {shown}")
    if rule.untold:
        shown = ", ".join(f"`{c[:12]}`" for c in rule.untold)
        lines.append(f"- not counted, a probe that stopped before the bad end's checks: {shown}")
    return lines


BACKENDS = {
    "attention_backend": "attention",
    "mla_prefill_backend": "MLA prefill",
    "moe_backend": "MoE",
    "moe_quant": "MoE weights",
    "gemm_kernel": "linear",
}
"""The kernel choices the first screen states (fingerprint.KERNEL_KEYS), as it names them."""

DEPENDENCIES = {
    "torch": "torch",
    "flashinfer": "flashinfer",
    "triton": "triton",
    "transformers": "transformers",
    "nccl": "nccl",
    "cuda_runtime": "CUDA runtime",
    "driver": "driver",
}
"""The dependency versions maintainers ask for, as the first screen names them: a build's
`packages` (read inside it), else what its collect_env said (CUDA runtime and driver: only
there). The engine's own version is the build's identity, not a dependency."""

# ---- the first screen ---------------------------------------------------------------------
#
# The facts a maintainer asks for first (DESIGN.md's Kimi case), built once as styled parts:
# report.md's first screen, report.html's top and the banner `run` ends with write the same
# facts, each escaping them for where it writes.

Style = Literal["text", "own", "code", "mark"]


@dataclass(frozen=True)
class Part:
    """A piece of a first-screen line, its text as it is: each writer escapes it."""

    text: str
    style: Style = "text"
    """`text`: from outside (escaped); `own`: llm-bisect's own words and numbers, as they
    are; `code`: a code span (ids, versions, digests); `mark`: own words that stand out (a
    change, a failure)."""
    href: str = ""
    """A link (links.py makes them: http(s) only)."""
    limit: int | None = None
    """Cut to this many characters (a subject, a prompt)."""


@dataclass(frozen=True)
class Fact:
    """One line of the first screen: what it is (`key`) and what it says."""

    key: str
    parts: tuple[Part, ...]
    depth: int = 0
    """0: a line of its own; 1: an item under the line before (a check under `checks`)."""


def _own(text: str) -> Part:
    return Part(text, "own")


def _code(text: str) -> Part:
    return Part(text, "code")


def md_part(part: Part) -> str:
    """A part as GitHub markdown."""
    text = part.text if part.limit is None else cell_text(part.text, part.limit)
    if part.style == "code":
        said = esc.code(text)
    elif part.style == "mark":
        said = f"**{part.text}**"
    elif part.style == "own":
        said = part.text
    else:
        said = esc.text(part.text, part.limit)
    return f"[{said}]({part.href})" if part.href else said


def md_fact(fact: Fact) -> str:
    """A fact as one line of GitHub markdown."""
    return "".join(md_part(p) for p in fact.parts)


def culprits(doc: ResultDocument) -> list[CandidateDoc | CulpritDoc]:
    """The answer's culprits, the first first (several where the first one's revert left the
    bad end bad and what remained was bisected: result.json `culprits`)."""
    if len(doc.culprits) > 1:
        return list(doc.culprits)
    return [doc.culprit] if doc.culprit is not None else []


def answer_facts(doc: ResultDocument) -> list[Fact]:
    """The answer and how sure it is: a line a culprit (the first with the run's status), or
    the status and why where there is none."""
    sure = sureness(doc)
    tail = (_own(f" ({sure})"),) if sure else ()
    status = Part(doc.status.value, "mark")
    d, first_bad = doc.deps, doc.first_bad_version
    if d is not None and first_bad is not None:
        last = (
            (_own(" (last good "), _code(d.last_good_version), _own(")"))
            if d.last_good_version
            else ()
        )
        release = (_own(" · first bad release: "), _code(f"{d.package} {first_bad}"), *last)
        return [Fact("answer", (status, *release, *tail))]
    found = culprits(doc)
    if not found:
        return [Fact("answer", (status, _own(" · "), Part(doc.message, limit=200)))]
    what = "first bad commit" if doc.mode is Mode.REGRESSION else "first good commit (the fix)"
    facts, base = [], doc.context.repo_url
    for n, c in enumerate(found):
        pr = pr_number(c.subject)
        pr_href = pr_url(base, pr) if pr is not None else ""
        lead = (status, _own(f" · {what}: ")) if n == 0 else (_own(f"culprit {n + 1}: "),)
        parts = (
            *lead,
            Part(c.commit[:12], "code", href=commit_url(base, c.commit)),
            _own(" "),
            Part(c.subject, limit=100),
            *((_own(" ("), Part(f"#{pr}", "own", href=pr_href), _own(")")) if pr_href else ()),
            *(tail if n == 0 else ()),
        )
        facts.append(Fact("answer", parts))
    return facts


def lies_fact(doc: ResultDocument) -> Fact:
    """What the answer assumes of lying verdicts, in one line."""
    found = doc.search
    if found is None:
        said = " takes every verdict as it reads (a lying start can move the answer)"
        return Fact("lies", (_own("lies assumed: none, "), _code("search.flake: 0"), _own(said)))
    rate = "auto" if found.flake == "auto" else f"{found.flake:g}"
    lead = (_own("lies assumed ("), _code(f"search.flake: {rate}"), _own("): "))
    return Fact("lies", (*lead, _own(ASSUMED_LINE)))


def _image_parts(fp: Fingerprint | None) -> tuple[Part, ...]:
    """A build's image by digest, else by id (said), else that it ran from none."""
    image = fp.image if fp is not None else None
    if image is not None and image.digest:
        return (_code(portable.pinned_name(image.ref, image.digest)),)
    if image is not None and image.id:
        return (_code(image.id), _own(" (image id: no registry digest)"))
    return (_own("no image: no registry digest"),)


def images_fact(builds: Sequence[tuple[str, Fingerprint | None]]) -> Fact:
    """Builds' images by digest, each by its label (where none ran from an image: said once)."""
    if all(fp is None or fp.image is None for _, fp in builds):
        return Fact(
            "images", (_own("images: none, the servers ran from no image (no registry digest)"),)
        )
    parts: list[Part] = [_own("images: ")]
    for n, (label, fp) in enumerate(builds):
        parts += [_own(f"{' · ' if n else ''}{label} "), *_image_parts(fp)]
    return Fact("images", tuple(parts))


def _ends(doc: ResultDocument) -> list[tuple[str, Fingerprint | None]]:
    """The good end, the builds either side of the change and the bad end, each once (a
    build that is two of them by both labels), with their fingerprints."""
    old_label, new_label = _labels(doc)
    sides = doc.fingerprints
    found: dict[str, tuple[list[str], Fingerprint | None]] = {}

    def add(label: str, commit: str, fp: Fingerprint | None) -> None:
        if commit in found:
            found[commit][0].append(label)
        elif fp is not None:
            found[commit] = ([label], fp)

    def probed(commit: str) -> Fingerprint | None:
        p = doc.probe_of(commit)
        return p.fingerprint if p is not None else None

    add("good end", doc.good, probed(doc.good))
    if sides is not None:
        add(old_label, sides.old.commit, sides.old)
        add(new_label, sides.new.commit, sides.new)
    add("bad end", doc.bad, probed(doc.bad))
    return [(" = ".join(labels), fp) for labels, fp in found.values()]


def _versions(fp: Fingerprint) -> dict[str, str]:
    """A build's DEPENDENCIES versions, where known."""
    said = {k: fp.packages.get(k) or fp.collect_env.get(k) for k in DEPENDENCIES}
    return {k: v for k, v in said.items() if v}


def _arrow(a: str | None, b: str | None) -> tuple[Part, ...]:
    return (_code(a or "—"), _own(" → "), _code(b or "—"))


def dependencies_fact(
    old: Fingerprint, new: Fingerprint, old_label: str, new_label: str, *, unknown: bool = False
) -> Fact | None:
    """The dependency versions that changed between two builds (the rest counted); None
    where neither build's are known (`unknown`: said so instead)."""
    a, b = _versions(old), _versions(new)
    known = [k for k in DEPENDENCIES if k in a or k in b]
    changed = [k for k in known if a.get(k) != b.get(k)]
    if not known:
        said = "dependencies: not recorded (no package versions or collect_env in the fingerprints)"
        return Fact("dependencies", (_own(said),)) if unknown else None
    if not changed:
        names = ", ".join(DEPENDENCIES[k] for k in known)
        return Fact("dependencies", (_own(f"dependencies: none changed ({names})"),))
    parts: list[Part] = [_own(f"dependencies changed ({old_label} → {new_label}): ")]
    for n, k in enumerate(changed):
        parts += [_own(f"{', ' if n else ''}{DEPENDENCIES[k]} "), *_arrow(a.get(k), b.get(k))]
    same = len(known) - len(changed)
    return Fact("dependencies", (*parts, *((_own(f" ({same} the same)"),) if same else ())))


def _backends(old: Fingerprint, new: Fingerprint) -> list[tuple[str, str | None, str | None]]:
    """(name, old, new) of each BACKENDS key either build's startup log states."""
    said = [(name, old.kernels.get(k), new.kernels.get(k)) for k, name in BACKENDS.items()]
    return [(name, a, b) for name, a, b in said if a is not None or b is not None]


def backends_fact(
    old: Fingerprint, new: Fingerprint, old_label: str, new_label: str
) -> Fact | None:
    """The backends two builds' startup logs state, a change marked ⚠."""
    parts: list[Part] = []
    for name, a, b in _backends(old, new):
        parts.append(_own(", ") if parts else _own(f"backends ({old_label} → {new_label}): "))
        if a == b:
            parts += [_own(f"{name} "), _code(a or "")]
        else:
            parts += [Part(f"⚠ {name}", "mark"), _own(" "), *_arrow(a, b)]
    return Fact("backends", tuple(parts)) if parts else None


def _weights_parts(weights: WeightsFacts | None) -> tuple[Part, ...]:
    """The model a build loaded and its revision, with how it was found."""
    if weights is None:
        return (_own("—"),)
    revision = _code(weights.revision) if weights.revision else _own("no revision")
    origin = (_own(" ("), Part(weights.origin), _own(")")) if weights.origin else ()
    return (Part(weights.model, "code", limit=120), _own(" at "), revision, *origin)


def weights_fact(old: Fingerprint, new: Fingerprint, old_label: str, new_label: str) -> Fact | None:
    """The weights two builds' servers loaded, a change marked ⚠."""
    if old.weights is None and new.weights is None:
        return None
    a, b = _weights_parts(old.weights), _weights_parts(new.weights)
    lead = _own(f"weights ({old_label} → {new_label}): ")
    if a == b:
        return Fact("weights", (lead, *a, _own(", the same on both")))
    return Fact("weights", (lead, Part("⚠", "mark"), _own(" "), *a, _own(" → "), *b))


def glance(old: Build, new: Build, old_label: str, new_label: str) -> list[str]:
    """Two builds' image digests, the dependency versions that changed and the backends
    their startup logs state (a change marked ⚠), as list items."""
    facts = [
        images_fact([(old_label, old), (new_label, new)])
        if old.image is not None or new.image is not None
        else None,
        dependencies_fact(old, new, old_label, new_label),
        backends_fact(old, new, old_label, new_label),
        weights_fact(old, new, old_label, new_label),
    ]
    return [f"- {md_fact(f)}" for f in facts if f is not None]


def logprob_drop(divergence: TokensPart) -> tuple[float, bool]:
    """Where the greedy tokens part: how much less likely the candidate finds the golden's
    token (|Δlogprob|), and whether that is only a lower bound (not in its top-k)."""
    golden, now = divergence.golden, divergence.candidate
    top = {t.token: _number(t.logprob) for t in now.top}
    mine, theirs = _number(golden.logprob), _number(now.logprob)
    if golden.token in top:
        drop = abs(mine - top[golden.token])
    elif top:  # below the least likely alternative this build listed
        drop = max(0.0, mine - min(top.values()))
    else:
        drop = abs(mine - theirs)
    return (drop if math.isfinite(drop) else 0.0), golden.token not in top and bool(top)


def _number(logprob: float | None) -> float:
    """A logprob as a figure: NaN where the server sent none (NaN or infinite)."""
    return math.nan if logprob is None else logprob


def _token_parts(token: Chosen) -> tuple[Part, ...]:
    text = (_own(" "), Part(repr(token.text), limit=24)) if token.text is not None else ()
    return (_code(token.token), *text)


def divergence_fact(doc: ResultDocument) -> Fact | None:
    """The first culprit's first token-id divergence from the golden (the logprobs check):
    the prompt, the position, both tokens and how much less likely the golden's token became."""
    bad = bad_probe(doc)
    if bad is None:
        return None
    lead = (_own("first token divergence ("), _code(bad.commit[:12]), _own(" vs the golden): "))
    cases = [
        case
        for check in bad.checks
        if check.name in showing("divergences") and isinstance(check.details, LogprobsDetails)
        for case in check.details.cases
    ]
    if not cases:
        return Fact("divergence", (*lead, _own("no logprobs check ran on it")))
    case = next((c for c in cases if c.divergence is not None), None)
    if case is None or case.divergence is None:
        ended = next((c for c in cases if c.first_divergence is not None), None)
        if ended is None:
            return Fact("divergence", (*lead, _own("none: its greedy tokens are the golden's")))
        where = (Part(repr(ended.prompt), limit=40), _own(f" at token {ended.first_divergence}"))
        return Fact("divergence", (*lead, *where, _own(": one output ends here")))
    d = case.divergence
    drop, bound = logprob_drop(d)
    parts = (
        *lead,
        Part(repr(case.prompt), limit=40),
        _own(f" at token {d.position}: golden "),
        *_token_parts(d.golden),
        _own(" → now "),
        *_token_parts(d.candidate),
        _own(f", Δlogprob {'≥ ' if bound else ''}{drop:.3f}"),
    )
    return Fact("divergence", parts)


def headline(check: CheckDoc) -> str:
    """A check's headline number, in its own terms."""
    d = check.details
    if isinstance(d, CanaryDetails) and d.cases:
        return f"{sum(1 for c in d.cases if c.problems)} of {len(d.cases)} prompts failed"
    if isinstance(d, ExpectDetails) and d.cases:
        return f"{sum(1 for c in d.cases if not c.passed)} of {len(d.cases)} cases failed"
    if isinstance(d, LogprobsDetails) and d.cases:
        return f"{d.metrics.not_close} of {len(d.cases)} prompts not close to the golden"
    if isinstance(d, EvalDetails) and d.metrics is not None:
        n = f" on {d.metrics.n}" if d.metrics.n else ""
        return f"accuracy {d.metrics.accuracy:.1%}{n}"
    if isinstance(d, LmEvalDetails) and d.tasks:
        return ", ".join(f"{t.task} {t.metric} {t.value:.3g}" for t in d.tasks[:3])
    return f"score {check.score:.3g}"


def checks_facts(doc: ResultDocument) -> list[Fact]:
    """Each check's headline number on the first culprit's build, the build before's beside."""
    pair = _bad_side(doc)
    if pair is None or not pair[0].checks:
        return []
    bad, good = pair
    old_label, new_label = _labels(doc)
    bad_label, good_label = (
        (new_label, old_label) if doc.mode is Mode.REGRESSION else (old_label, new_label)
    )
    theirs = {c.name: c for c in good.checks}
    head = (
        _own(f"checks on the {bad_label} build "),
        _code(bad.commit[:12]),
        _own(f" (in brackets: the {good_label} build "),
        _code(good.commit[:12]),
        _own(")"),
    )
    facts = [Fact("checks", head)]
    for check in bad.checks:
        other = theirs.get(check.name)
        parts = (
            _code(check.name),
            _own(" "),
            Part("FAIL", "mark") if not check.passed else _own("pass"),
            _own(f": {headline(check)}"),
            _own(f" ({headline(other)})" if other is not None else " (not run)"),
        )
        facts.append(Fact("check", parts, depth=1))
    return facts


def doubted_facts(doc: ResultDocument) -> list[Fact]:
    """Each slot whose verdicts stand apart from the others'."""
    return [Fact("doubted", (_own("⚠ "), Part(d.line))) for d in doubted(doc.probes)]


def screen(doc: ResultDocument) -> list[Fact]:
    """The facts of the first screen below the answer, in the order maintainers ask for them:
    the images, the dependency versions that changed, the backends (and weights), the first
    culprit's first divergence, each check's headline number, a doubted slot."""
    ends = _ends(doc)
    facts: list[Fact | None] = [images_fact(ends) if ends else None]
    sides = doc.fingerprints
    if sides is not None:
        labels = _labels(doc)
        facts += [
            dependencies_fact(sides.old, sides.new, *labels, unknown=True),
            backends_fact(sides.old, sides.new, *labels),
            weights_fact(sides.old, sides.new, *labels),
        ]
    if doc.culprit is not None:
        facts.append(divergence_fact(doc))
    facts += checks_facts(doc)
    facts += doubted_facts(doc)
    return [f for f in facts if f is not None]


def first_screen(doc: ResultDocument) -> list[str]:
    """report.md's first screen (docs/outputs.md): the answer and how sure it is (a line a
    culprit), the ends, probes and time, the lies assumed; then `screen`'s facts."""
    ctx, base = doc.context, doc.context.repo_url
    compare = compare_url(base, doc.range[0], doc.range[-1]) if len(doc.range) >= 2 else ""
    ends = compare_url(base, doc.good, doc.bad) if doc.mode is Mode.REGRESSION else ""
    links = [f"[the change]({compare})" if compare else "", f"[the range]({ends})" if ends else ""]
    shown = " · ".join(x for x in links if x)
    between = f"> good {_ref(ctx.good_ref, doc.good)} → bad {_ref(ctx.bad_ref, doc.bad)}"
    if doc.deps is not None:
        d = doc.deps
        between = (
            f"> good {esc.code(f'{d.package} {d.good}')} → bad {esc.code(f'{d.package} {d.bad}')}"
            f" · {_engine(d)}"
        )
    spent = sum(p.timings.get("total", 0.0) for p in doc.probes if not p.given)
    wall = (
        doc.ended_at - doc.started_at
        if doc.ended_at is not None and doc.started_at is not None
        else None
    )
    ran = [p for p in doc.probes if not p.given]
    lines = [f"> {md_fact(f)}" for f in answer_facts(doc)]
    lines += [
        between + (f" · {shown}" if shown else ""),
        f"> {len(ran)} probes over {doc.candidates} candidates · {duration(wall)} "
        f"({duration(spent)} in probes) · mode `{doc.mode.value}` · `regress: {doc.regress.value}`",
        *([f"> {esc.text(said)}"] if (said := cost_said(doc)) else []),
        f"> {md_fact(lies_fact(doc))}",
        "",
    ]
    facts = screen(doc)
    lines += [f"{'  ' * f.depth}- {md_fact(f)}" for f in facts]
    return [*lines, ""] if facts else lines


def starts_made(doc: ResultDocument) -> dict[str, int]:
    """The server starts a run made, by what they were for: the search's probes, the
    confirmation's trials (a tree the run probed already is no start), the evidence's probes
    with every check, the later builds and the localisation's two."""
    found = doc.confirmation
    made = {
        "search": sum(1 for p in doc.probes if not p.given),
        "confirmation": sum(
            1 for p in (found.probes if found else []) if p.reused is None and p.verdict
        ),
        "evidence": len(doc.decisive),
        "later": len(doc.later),
        "localisation": 2 if doc.localization is not None else 0,
    }
    return {k: v for k, v in made.items() if v}


def cost_said(doc: ResultDocument) -> str:
    """What the run cost against what it was expected to (cost.py, as `candidates` and the
    progress line said): starts, and node-hours at this run's own mean start time; "" where
    the expected figure was not recorded."""
    expected = doc.context.expected
    if expected is None:
        return ""
    made = starts_made(doc)
    total = sum(made.values())
    parts = ", ".join(f"{v} {k}" for k, v in made.items())
    said = (
        f"cost: {total} server starts ({parts}); expected about {expected.starts:.0f}, at most "
        f"{expected.worst} if no verdict lies"
    )
    timed = [p.timings["total"] for p in doc.probes if not p.given and "total" in p.timings]
    if timed:
        mean = sum(timed) / len(timed)
        nodes = f"{expected.nodes} nodes a start" if expected.nodes > 1 else "1 node a start"
        said += (
            f" · {total * expected.nodes * mean / 3600:.2f} node-hours ({nodes}, "
            f"{duration(mean)} a start on this run's probes)"
        )
    return said


def _changed_fact(doc: ResultDocument) -> Fact | None:
    """The backends and dependency versions that changed between the builds either side of
    the change, only those."""
    sides = doc.fingerprints
    if sides is None:
        return None
    old_label, new_label = _labels(doc)
    parts: list[Part] = []
    a, b = _versions(sides.old), _versions(sides.new)
    changed = [(name, x, y) for name, x, y in _backends(sides.old, sides.new) if x != y]
    changed += [(DEPENDENCIES[k], a.get(k), b.get(k)) for k in DEPENDENCIES if a.get(k) != b.get(k)]
    for name, x, y in changed:
        parts += [_own(", ") if parts else _own(f"changed ({old_label} → {new_label}): ")]
        parts += [_own(f"{name} "), *_arrow(x, y)]
    if not parts:
        said = f"no backend or dependency version changed ({old_label} → {new_label})"
        return Fact("changed", (_own(said),))
    return Fact("changed", tuple(parts))


BANNER_LINES = 12
"""The most lines the banner `run` ends with may take."""
BANNER_CULPRITS = 4
"""Culprits the banner names each on a line of its own; more are counted."""


def banner(doc: ResultDocument, report: str) -> list[str]:
    """What `run` ends with, to paste into an issue (markdown, escaped as report.md is; at
    most BANNER_LINES lines): the answer and how sure it is, the culprits, the
    confirmation, the backends and dependency versions that changed, the first divergence,
    and where the report is."""
    answer = answer_facts(doc)
    lines = [f"**llm-bisect** {md_fact(answer[0])}"]
    lines += [f"- {md_fact(f)}" for f in answer[1:BANNER_CULPRITS]]
    if len(answer) > BANNER_CULPRITS:
        lines.append(f"- and {len(answer) - BANNER_CULPRITS} more culprit(s): see the report")
    found = doc.confirmation
    if found is not None:
        lines.append(f"- confirmation: **{found.status}**: {esc.text(found.reason, 300)}")
    for fact in (_changed_fact(doc), divergence_fact(doc) if doc.culprit else None):
        if fact is not None:
            lines.append(f"- {md_fact(fact)}")
    lines.append(f"- report: {esc.code(report)}")
    return lines


def render_markdown(doc: ResultDocument) -> str:
    """The report of a run."""
    status = doc.status
    title = (
        f"{status.value}: {doc.culprit.commit[:12]} {cell(doc.culprit.subject, 80)}"
        if doc.culprit is not None and doc.search is not None
        else f"{doc.culprit.commit[:12]} {cell(doc.culprit.subject, 80)}"
        if doc.culprit is not None
        else status.value
    )
    deps = doc.deps
    if deps is not None and doc.first_bad_version is not None:
        first_bad = cell(f"{deps.package} {doc.first_bad_version}", 80)
        title = f"{status.value}: {first_bad}, the first bad release"
    sure = sureness(doc)
    lines = [f"# llm-bisect: {title}" + (f" ({sure})" if sure else ""), "", *first_screen(doc)]
    lines.append(f"**Status:** {status.value} — {esc.text(doc.message)}")
    lines.append("")
    if deps is not None:
        as_given = "" if deps.engine.startswith(deps.build) else f" ({esc.code(deps.build)})"
        route = f", built by {esc.code(deps.route)}" if deps.route else ""
        lines.append(f"- engine: `{deps.engine}`{as_given}{route}, held at every probe")
        lines.append(
            f"- good: {esc.code(f'{deps.package} {deps.good}')} (`{doc.good[:12]}` of "
            "versions.git, made by llm-bisect: one commit a release)"
        )
        lines.append(f"- bad: {esc.code(f'{deps.package} {deps.bad}')} (`{doc.bad[:12]}`)")
    else:
        lines.append(f"- good: `{doc.good}`")
        lines.append(f"- bad: `{doc.bad}`")
    if doc.merge_base:
        lines.append(f"- merge base: `{doc.merge_base}`")
    given = [p for p in doc.probes if p.given]
    held = f", verdicts given: {esc.text(', '.join(p.given for p in given))}" if given else ""
    lines.append(
        f"- candidates: {doc.candidates}, probes run: {len(doc.probes) - len(given)}{held}"
    )
    lines.append(f"- what counts as a regression: `regress: {doc.regress.value}`")
    lines += _releases(doc)
    lines += _symptom(doc)
    lines.append("")
    lines += _caveats(doc)
    culprit = doc.culprit
    if culprit and deps is not None:
        lines += [
            "## Culprit: first bad release",
            "",
            f"{_release(doc)}, installed over {_engine(deps)}",
            "",
            f"- in versions.git (made by llm-bisect, one commit a release): `{culprit.commit}`",
            "",
        ]
    elif culprit:
        what = "first bad commit" if doc.mode is Mode.REGRESSION else "first good commit (fix)"
        url = commit_url(doc.context.repo_url, culprit.commit)
        pr = pr_number(culprit.subject)
        pr_href = pr_url(doc.context.repo_url, pr) if pr is not None else ""
        lines += [
            f"## Culprit: {what}",
            "",
            f"`{culprit.commit}` {esc.text(culprit.subject)}",
            "",
            f"- author: {esc.text(culprit.author)}",
            f"- date: {esc.text(culprit.date)}",
        ]
        if url:
            lines.append(f"- commit: {url}")
        if pr_href:
            lines.append(f"- pull request: {pr_href}")
        if doc.reach is not None and doc.reach.sentence:
            lines.append(f"- where it is: {esc.text(doc.reach.sentence)}")
        lines.append("")
    lines += _culprits(doc)
    if status is Status.AMBIGUOUS:
        lines += ["## Could be any of", ""]
        lines += [f"- `{c}`" for c in doc.range[1:]]
        lines += ["", f"(after the last tested `{doc.range[0][:12]}`)", ""]
    if doc.fix_range:
        base, ref = doc.fix_range
        lines += [
            "## Where to look instead",
            "",
            f"The change is older than the branch point. The range `{base[:12]}..{ref[:12]}` "
            "holds the commit that undid it; bisect it with `--find-fix`.",
            "",
        ]
    lines += _confidence(doc)
    lines += _fast(doc)
    lines += _confirmation(doc)
    lines += _later(doc)
    lines += _bumps(doc)
    lines += _warnings(doc)
    lines += _reproduce(doc)
    lines += _away(doc)
    lines += _localization(doc)
    lines += _evidence(doc)
    lines += environment_lines(doc.context)
    lines += _collect_env(doc)
    lines += _fingerprints(doc)
    lines += _thresholds(doc)
    lines += _power(doc)
    lines += _probes(doc)
    return "\n".join(lines).rstrip() + "\n"
