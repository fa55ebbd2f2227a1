"""What a gate writes besides gate.json: report.md, report.html and a JUnit XML for CI
dashboards. Pure: a typed gate document in, text out; text from outside through `escape`."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import PurePath

from .. import escape as esc
from ..checks.eval import EvalDetails
from ..checks.lm_eval import LmEvalDetails, TaskJudgement
from ..escape import cell
from ..model import CheckDetails, Verdict
from . import portable
from .documents import Decision, GateDocument, GateReason
from .html import logprob_figure, page, table
from .links import commit_url
from .markdown import (
    away,
    builds_compared,
    divergences,
    duration,
    environment_lines,
    glance,
    power_lines,
    reproduce_repo,
    without_llm_bisect,
)

DECISION_OF: dict[Verdict, Decision] = {
    Verdict.GOOD: "allow",
    Verdict.BAD: "block",
    Verdict.SKIP: "inconclusive",
    Verdict.UNSURE: "inconclusive",
}
EXIT_OF = {"allow": 0, "block": 1, "inconclusive": 125}
"""`gate` exit codes; 128 and more are errors (bad input 128, any other 129, interrupted 130)."""
HEADLINE = {
    "allow": "ALLOW: the release candidate matches the last good build",
    "block": "BLOCK: the release candidate regressed against the last good build",
    "inconclusive": "INCONCLUSIVE: the release candidate could not be tested",
}
HEADLINE_OF: dict[GateReason, str] = {
    "start-failure": "BLOCK: the release candidate does not start where the last good build does",
    "node": "INCONCLUSIVE: neither the release candidate nor the last good build starts here",
    "flaky-start": "INCONCLUSIVE: the release candidate started on its second try only",
    "second-start-bad": "BLOCK: the release candidate's first start failed; its second tested bad",
}
"""The headline when the candidate's checks did not decide (documents.GateReason)."""
ROLE = {"candidate": "the candidate again", "golden-build": "the golden's build"}


def power_said(doc: GateDocument) -> list[tuple[str, str]]:
    """What the eval could see, as (name, line): its power, with the assumption behind it;
    on allow, the smallest drop it would have caught (a smaller one passes unseen). The
    terminal's, report.md's, report.html's and JUnit's (`name: line`)."""
    power = doc.eval_power
    said = [("eval power", power.said())] if power is not None else []
    if doc.decision == "allow":
        caught = (
            "no eval ran, so no accuracy drop was measured"
            if power is None
            else f"the smallest accuracy drop it would have caught is {power.detectable_drop:.1%} "
            f"(with power {power.power:g}); a smaller one passes unseen"
        )
        said.append(("allow", caught))
    return said


def _trials(doc: GateDocument) -> list[str]:
    """The starts after the candidate never became ready: which, why, what happened."""
    if not doc.trials:
        return []
    lines = [
        "## Starts",
        "",
        "The candidate's server never became ready, so the gate started builds again, on the "
        "same launcher, to tell a build that does not start from a node that starts nothing:",
        "",
        "| start | build | why | ready | what happened |",
        "|---|---|---|---|---|",
        f"| 1 | candidate `{doc.probe.commit[:12]}` | the gate's probe | no | "
        f"{cell(doc.probe.reason, 200)} |",
    ]
    for i, trial in enumerate(doc.trials, 2):
        t = trial.probe
        ready = "yes" if "ready" in t.timings else "no"
        lines.append(
            f"| {i} | {ROLE[trial.role]} `{t.commit[:12]}` | {cell(trial.why, 200)} | {ready} "
            f"| {cell(t.reason, 200)} |"
        )
    lines.append("")
    for trial in doc.trials:
        if trial.probe.log_tail:
            lines += [
                f"<details><summary>Server log of {ROLE[trial.role]} (last lines)</summary>",
                "",
                *esc.fence(trial.probe.log_tail),
                "",
                "</details>",
                "",
            ]
    return lines


def _took(doc: GateDocument) -> str:
    if doc.started_at is None or doc.ended_at is None:
        return "—"
    return duration(doc.ended_at - doc.started_at)


def render_gate_markdown(doc: GateDocument) -> str:
    """The gate's report.md: the decision first, then each check, the divergence from the
    golden, the bisection it started, the node."""
    c, probe = doc.candidate, doc.probe
    url = commit_url(doc.context.repo_url, c.commit)
    sha = f"[`{c.commit[:12]}`]({url})" if url else f"`{c.commit[:12]}`"
    lines = [
        f"# llm-bisect gate: {doc.decision.upper()} {esc.text(doc.candidate_ref)}",
        "",
        f"> **{esc.text(doc.message)}** (exit {doc.exit_code})",
        f"> candidate {esc.code(doc.candidate_ref)} = {sha} {cell(c.subject, 100)}",
        f"> golden of `{doc.golden.commit[:12]}` ({esc.code(doc.golden.path)}"
        f"{', recorded by this gate' if doc.golden.recorded else ''}) · {_took(doc)}",
        "",
        f"**Verdict:** {probe.verdict.value} — {esc.text(probe.reason)}",
        "",
    ]
    said = [f"- **{name}:** {esc.text(line)}" for name, line in power_said(doc)]
    lines += [*said, ""] if said else []
    if doc.fingerprints is not None:  # on the first screen, as the run report has them
        seen = glance(doc.fingerprints.old, doc.fingerprints.new, "golden", "candidate")
        lines += [*seen, ""] if seen else []
    if doc.warnings:
        lines += ["## Warnings", "", *[f"- ⚠ {esc.text(w)}" for w in doc.warnings], ""]
    if probe.checks:
        lines += ["## Checks", "", "| check | result | evidence |", "|---|---|---|"]
        for check in probe.checks:
            result = "pass" if check.passed else "**FAIL**"
            lines.append(f"| {cell(check.name)} | {result} | {cell(check.evidence, 300)} |")
        lines.append("")
    lines += _trials(doc)
    lines += divergences(probe)
    lines += power_lines(doc.eval_power)
    if doc.fingerprints is not None:
        lines += builds_compared(doc.fingerprints, "golden", "candidate")
    elif not probe.fingerprint.known:
        lines += ["The candidate's build never served, so no builds are compared.", ""]
    else:
        lines += [
            "The golden keeps no fingerprint of its build (recorded by an older llm-bisect), "
            "so no builds are compared: record it anew (`llm-bisect golden`, or `gate "
            "--record`).",
            "",
        ]
    if probe.log_tail:
        lines += [
            "<details><summary>Server log (last lines)</summary>",
            "",
            *esc.fence(probe.log_tail),
            "",
            "</details>",
            "",
        ]
    b = doc.bisection
    if b is not None:
        found = (
            f"`{b.culprit.commit}` {esc.text(b.culprit.subject)}"
            if b.culprit is not None
            else esc.text(b.message)
        )
        state = b.status.value if b.status is not None else "unfinished (run the gate again)"
        lines += [
            "## Bisection",
            "",
            f"{state} after {b.probes} more probes (the golden's build good and the "
            f"candidate bad were given, not probed again): {found}",
            "",
            f"Its report: {esc.code(f'{b.out}/report.md')}",
            "",
        ]
    command = probe.fingerprint.command
    config = doc.context.config or "CONFIG"
    again = ["llm-bisect", "gate", config, "--candidate", doc.candidate_ref]
    again += ["--golden", doc.golden.path, *reproduce_repo(doc.context)]
    again += ["--eval-config", doc.eval_config] if doc.eval_config else []
    again += ["--eval-data", doc.eval_data] if doc.eval_data else []
    lines += [
        "## Reproduce",
        "",
        *esc.fence(f"{esc.shell(again)}   # expect {doc.decision}: exit {doc.exit_code}", "bash"),
        "",
    ]
    if command:
        lines += ["The candidate's server ran as:", "", *esc.fence(command, "bash"), ""]
    lines += _away(doc)
    lines += environment_lines(doc.context)
    return "\n".join(lines).rstrip() + "\n"


EXPECT = {Verdict.GOOD: "good: exit 0", Verdict.BAD: "bad: exit 1",
          Verdict.SKIP: "skip: exit 125", Verdict.UNSURE: "unsure: exit 125"}  # fmt: skip
"""What `check` of the candidate says for its probe's verdict."""


def _away(doc: GateDocument) -> list[str]:
    """The gate away from this machine, as the run report has it: the golden and the config
    by their attachment names, the gate and `check` lines that use them, the candidate's
    `docker run` by digest and a `curl` of the canary's first failing prompt."""
    ctx = doc.context.model_copy(update={"golden": doc.golden.path})
    folder = portable.clone_folder(ctx)
    files = [(PurePath(here).name, here) for here in (doc.eval_config, doc.eval_data) if here]
    evals = [w for flag, (name, _) in zip(("--eval-config", "--eval-data"), files,
                                          strict=False) for w in (flag, name)]  # fmt: skip
    again = ["llm-bisect", "gate", portable.CONFIG, "--candidate", doc.candidate_ref,
             "--golden", portable.GOLDEN, "--repo", folder, *evals]  # fmt: skip
    commands = [f"{esc.shell(again)}   # expect {doc.decision}: exit {doc.exit_code}"]
    if not files:  # `check` judges by the config's checks only, not by an eval file
        commands += [
            f"{esc.shell(portable.check_argv(ctx, doc.candidate.commit))}   "
            f"# expect {EXPECT[doc.probe.verdict]}",
            f"{esc.shell(portable.check_argv(ctx, doc.golden.commit))}   # expect good: exit 0",
        ]
    return away(ctx, commands, "gate", without_llm_bisect(doc.probe, "candidate"), files)


def render_gate_html(doc: GateDocument) -> str:
    """The gate's report.html: the decision and, when the candidate served, its per-position
    |Δlogprob| against the golden."""
    colour = {"allow": "#2e7d32", "block": "#c62828", "inconclusive": "#9e9e9e"}[doc.decision]
    summary = (
        f'<div class="summary" style="border-color:{colour}">'
        f"<b>{esc.html_text(doc.message)}</b><br>candidate "
        f"<code>{esc.html_text(doc.candidate_ref)}</code> = <code>{doc.candidate.commit[:12]}"
        f"</code> {esc.html_text(doc.candidate.subject)}<br>"
        f"{esc.html_text(doc.probe.reason)}"
        + "".join(f"<br>{name}: {esc.html_text(line)}" for name, line in power_said(doc))
        + "</div>"
    )
    plots = [("logprobs", logprob_figure(doc.probe), "no logprobs check ran on the candidate")]
    return page(f"gate {doc.decision} {doc.candidate_ref}", summary, plots, table([doc.probe]))


def _tasks(details: CheckDetails) -> list[TaskJudgement]:
    """The per-task judgements of an lm_eval check's details; [] for any other check."""
    return list(details.tasks) if isinstance(details, LmEvalDetails) else []


def _eval_properties(case: ET.Element, details: EvalDetails) -> None:
    """An eval test case's properties: what it asked, its accuracy, and its power with the
    assumption behind it."""
    x = esc.xml_text
    shown: dict[str, str] = {}
    if details.data:
        shown["data"] = details.data
    if details.metrics is not None:
        shown["accuracy"] = f"{details.metrics.accuracy:.4f}"
    power = details.power
    if power is not None:
        shown |= {
            "detectable drop": f"{power.detectable_drop:.4f}",
            "power": f"{power.power:g}",
            "alpha": f"{power.alpha:g}",
            "answers compared": str(power.n),
            "flips": f"{power.flips:.4f}",
            "flips assumption": power.assumption(),
        }
    if shown:
        props = ET.SubElement(case, "properties")
        for name, value in shown.items():
            ET.SubElement(props, "property", name=x(name), value=x(value))


def render_junit(doc: GateDocument) -> str:
    """A JUnit XML: one test case per check, and `decision`, which fails on block and errs
    when the candidate could not be tested (so a dashboard never shows it green). Every text
    holds only what XML 1.0 allows (a reply's or a log's control characters are left out)."""
    probe = doc.probe
    x = esc.xml_text
    suite = ET.Element(
        "testsuite",
        name="llm-bisect gate",
        tests=str(len(probe.checks) + 1),
        failures=str(sum(not c.passed for c in probe.checks) + (doc.decision == "block")),
        errors=str(int(doc.decision == "inconclusive")),
        time=f"{probe.timings.get('total', 0.0):.1f}",
    )
    # a dashboard splits a classname at its dots into packages ("llm-bisect", "gate",
    # "v0", "27", "0"): none in it, whatever the ref holds
    classname = x(f"llm-bisect/gate/{doc.candidate_ref}".replace(".", "_"))
    tasks = 0
    for check in probe.checks:
        case = ET.SubElement(suite, "testcase", classname=classname, name=x(check.name))
        if not check.passed:
            failure = ET.SubElement(case, "failure", message=x(check.evidence[:500]))
            failure.text = x(check.evidence)
        if isinstance(check.details, EvalDetails):
            _eval_properties(case, check.details)
        for judged in _tasks(check.details):  # an lm_eval check: a test case per task
            tasks += 1
            task = ET.SubElement(
                suite, "testcase", classname=classname, name=x(f"{check.name}/{judged.task}")
            )
            props = ET.SubElement(task, "properties")
            shown = {"metric": judged.metric, "value": f"{judged.value:.4f}"}
            if judged.golden_value is not None:
                shown["golden"] = f"{judged.golden_value:.4f}"
            for metric, least in judged.floor.items():
                shown[f"threshold {metric}"] = f"{least:.4f}"
            for name, value in shown.items():
                ET.SubElement(props, "property", name=x(name), value=x(value))
            if not judged.passed:
                text = "; ".join(judged.failures)
                ET.SubElement(task, "failure", message=x(text[:500])).text = x(text)
    suite.set("tests", str(len(probe.checks) + 1 + tasks))
    failed_tasks = sum(not j.passed for c in probe.checks for j in _tasks(c.details))
    suite.set("failures", str(int(suite.get("failures", "0")) + failed_tasks))
    case = ET.SubElement(
        suite,
        "testcase",
        classname=classname,
        name="decision",
        time=f"{probe.timings.get('total', 0.0):.1f}",
    )
    caught = power_said(doc)
    if caught:  # what the eval could see, and on allow what it would have caught
        props = ET.SubElement(case, "properties")
        for name, line in caught:
            ET.SubElement(props, "property", name=name, value=x(line))
    said = [probe.reason, *(f"{ROLE[t.role]}: {t.probe.reason}" for t in doc.trials)]
    if doc.decision == "block":
        told = "\n".join([*said, probe.log_tail]) if doc.trials else probe.reason
        ET.SubElement(case, "failure", message=x(doc.message)).text = x(told.strip())
    elif doc.decision == "inconclusive":
        ET.SubElement(case, "error", message=x(doc.message)).text = x(
            "\n".join([*said, probe.log_tail]).strip()
        )
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, "unicode") + "\n"
