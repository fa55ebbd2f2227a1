"""report.html: one self-contained file (plotly's JavaScript inlined, no network needed) with
the plots a person would rather look at than read. Pure: a typed document in, HTML out.

    the range narrowing probe by probe      documents.ResultDocument.narrowing
    a timeline of probes, phase by phase    probe timings and wall-clock starts
    |Δlogprob| per position vs the golden   the bad side's logprobs check: where the greedy
                                            tokens part, and the teacher-forced scores
    accuracy and its 95% interval per probe the eval check

Above them, report.md's first-screen facts (markdown.screen), in its order.

Text from outside passes through `escape.html_text` (plotly reads a little HTML in trace names
too); links are http(s) only (`links`).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from .. import escape as esc
from ..checks.eval import EvalDetails
from ..checks.logprobs import LogprobsDetails, Token, TokensPart
from ..kinds import showing
from ..model import Verdict
from ..startup import PHASE_LABELS
from .documents import ProbeDoc, ResultDocument
from .markdown import (
    Fact,
    Part,
    answer_facts,
    bad_probe,
    cell_text,
    cost_said,
    duration,
    lies_fact,
    logprob_drop,
    screen,
)

COLOURS = {
    Verdict.GOOD: "#2e7d32",
    Verdict.BAD: "#c62828",
    Verdict.SKIP: "#9e9e9e",
    Verdict.UNSURE: "#ef6c00",
}
STARTUP_COLOURS: tuple[str, ...] = ("#004d40", "#00695c", "#00796b", "#00897b", "#8e24aa")
STARTUP_COLOURS += ("#26a69a", "#4db6ac", "#80cbc4")
"""imports, config, engine, weights, compile (purple: what a shared cache saves), ..."""
PHASES = (
    ("artifact", "look up the artifact", "#90a4ae"),
    ("launch", "pull or build, start", "#5c6bc0"),
    ("ready", "wait until ready", "#26a69a"),
    *(  # the wait until ready, phase by phase, where the server's log names them
        (f"startup:{name}", label, colour)
        for (name, label), colour in zip(
            PHASE_LABELS.items(),
            STARTUP_COLOURS,
            strict=True,
        )
    ),
    ("checks", "checks", "#ffa726"),
    ("teardown", "stop", "#bdbdbd"),
)
ERRORS_ID = "llm-bisect-errors"
Plot = tuple[str, "go.Figure | None", str]
"""(name, the figure or None, what to say when there is none)."""

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:2em} code{font-size:.95em}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ddd;padding:3px 8px}
.summary{background:#f6f8fa;border-left:4px solid #888;padding:.6em 1em}
.note{color:#666;font-style:italic} #llm-bisect-errors{color:#c62828}
"""
_ON_ERROR = (
    "window.addEventListener('error',function(e){var d=document.getElementById('"
    + ERRORS_ID
    + "');d.textContent+='This page failed to draw: '+e.message+'\\n';});"
)


def _short(commit: str) -> str:
    return commit[:12]


def narrowing_figure(doc: ResultDocument) -> go.Figure | None:
    """The candidates still in question after each probe, and where each probe landed."""
    steps = doc.narrowing
    if not steps:
        return None
    fig = go.Figure()
    x = [s.probe for s in steps]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[s.hi for s in steps],
            mode="lines",
            line={"shape": "hv", "width": 0},
            showlegend=False,
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[s.lo for s in steps],
            mode="lines",
            line={"shape": "hv", "width": 0},
            fill="tonexty",
            fillcolor="rgba(92,107,192,0.18)",
            name="culprit lies in here",
            hoverinfo="skip",
        )
    )
    for verdict in Verdict:
        mine = [s for s in steps if s.verdict is verdict]
        if not mine:
            continue
        fig.add_trace(
            go.Scatter(
                x=[s.probe for s in mine],
                y=[s.index for s in mine],
                mode="markers",
                marker={"color": COLOURS[verdict], "size": 11},
                name=verdict.value,
                text=[f"{_short(s.commit)}: {s.hi - s.lo} left" for s in mine],
                hovertemplate="probe %{x}: candidate %{y}<br>%{text}<extra></extra>",
            )
        )
    fig.update_layout(
        title="The range, probe by probe",
        xaxis_title="probe",
        yaxis_title="candidate (0 = old end)",
        yaxis_range=[-0.5, max(doc.sequence_length - 0.5, 1)],
        height=380,
    )
    return fig


def _phases(p: ProbeDoc) -> list[tuple[str, float, float]]:
    """(phase, start, end) in seconds since the probe began, from its timings."""
    t = p.timings
    marks: list[tuple[str, float]] = []
    for key in ("artifact", "launch", "ready"):
        if key in t:
            marks.append((key, t[key]))
    if "checks" in t and "ready" in t:
        marks.append(("checks", t["ready"] + t["checks"]))
    if "total" in t:
        marks.append(("teardown", t["total"]))
    spans, start = [], 0.0
    for name, end in marks:
        if end >= start:
            spans.append((name, start, end))
            start = end
    if p.startup is not None and p.startup.phases:
        at = next((i for i, span in enumerate(spans) if span[0] == "ready"), None)
        if at is not None:
            spans[at : at + 1] = [(f"startup:{s.name}", s.start, s.end) for s in p.startup.phases]
    return spans


def timeline_figure(doc: ResultDocument) -> go.Figure | None:
    """Each probe as a bar of its phases, at the time it ran."""
    ran = [p for p in doc.probes if p.timings and not p.given]
    if not ran:
        return None
    zero = min((p.started_at for p in ran if p.started_at is not None), default=None)
    fig = go.Figure()
    labels = [f"{i}. {_short(p.commit)} {p.verdict.value}" for i, p in enumerate(ran, 1)]
    offsets = []
    clock = 0.0
    for p in ran:
        if zero is not None and p.started_at is not None:
            offsets.append(p.started_at - zero)
        else:  # no wall clock (an old journal): one after another
            offsets.append(clock)
        clock = offsets[-1] + p.timings.get("total", 0.0)
    for key, name, colour in PHASES:
        xs, bases, ys = [], [], []
        for label, p, off in zip(labels, ran, offsets, strict=True):
            for phase, start, end in _phases(p):
                if phase == key:
                    xs.append(end - start)
                    bases.append(off + start)
                    ys.append(label)
        if xs:
            fig.add_trace(
                go.Bar(
                    x=xs,
                    y=ys,
                    base=bases,
                    orientation="h",
                    name=name,
                    marker_color=colour,
                    hovertemplate="%{y}<br>" + name + ": %{x:.1f}s<extra></extra>",
                )
            )
    fig.update_layout(
        title="Probes over time",
        barmode="overlay",
        xaxis_title="seconds since the first probe began",
        yaxis={"autorange": "reversed"},
        height=max(260, 40 * len(ran) + 120),
    )
    return fig


LOGPROBS_CAPTION = (
    "Solid: |Δlogprob| of the token both builds chose, position by position, up to the "
    "first position where their greedy tokens part (dashed line; labelled golden token → "
    "this build's): there, how much less likely this build finds the golden's token (✕), or "
    "at least how much (▲: the golden's token is not even in this build's top-k). Dotted: "
    "the golden's own continuation scored by this build (teacher-forced) at every position, "
    "also after the texts part ways. Hover a point for the logprobs."
)


def _shown(token: Token) -> str:
    """A token as the plot names it: its text (repr, so spaces show), else its id."""
    return repr(esc.plain(token.text)) if token.text else f"id {esc.plain(token.token)}"


def _parting(divergence: TokensPart) -> tuple[float, bool, str, str]:
    """At the first divergence: how much less likely the candidate finds the golden's token
    (|Δlogprob|), whether that is only a lower bound (not in its top-k), a label naming both
    tokens, and a sentence with their logprobs."""
    golden, now = divergence.golden, divergence.candidate
    drop, bound = logprob_drop(divergence)
    mine = math.nan if golden.logprob is None else golden.logprob
    theirs = math.nan if now.logprob is None else now.logprob
    said = (
        f"tokens part at {divergence.position}: golden {_shown(golden)} "
        f"({mine:.3f}) → now {_shown(now)} ({theirs:.3f})"
    )
    if bound:
        said += f"; the golden's token is not in this build's top-{len({t.token for t in now.top})}"
    label = f"{divergence.position}: {_shown(golden)} → {_shown(now)}"
    return drop, bound, label, said


CAPTIONS = {"logprobs": esc.html_text(LOGPROBS_CAPTION)}
"""What a plot shows, said under it."""


def logprob_figure(bad: ProbeDoc | None) -> go.Figure | None:
    """Per prompt, a (bad) build vs the golden: |Δlogprob| of the shared greedy tokens up to
    the first divergence, the divergence marked with both tokens, and the teacher-forced
    |Δlogprob| of the golden's continuation at every position (see LOGPROBS_CAPTION)."""
    if bad is None:
        return None
    cases = [
        c
        for check in bad.checks
        if check.name in showing("divergences") and isinstance(check.details, LogprobsDetails)
        for c in check.details.cases
        if c.teacher_deltas or c.greedy_deltas or c.divergence
    ]
    if not cases:
        return None
    fig = go.Figure()
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
    for n, case in enumerate(cases):
        colour = palette[n % len(palette)]
        prompt = esc.plain(case.prompt)
        name = esc.html_text(prompt if len(prompt) <= 40 else prompt[:39] + "…")
        greedy = list(case.greedy_deltas)
        first = case.first_divergence
        divergence = case.divergence
        xs, ys = list(range(len(greedy))), greedy
        parting = _parting(divergence) if divergence is not None else None
        if parting is not None and isinstance(first, int):
            xs, ys = [*xs, first], [*ys, parting[0]]
        if ys:
            fig.add_trace(
                go.Scatter(
                    x=xs, y=ys, mode="lines+markers", name=name, legendgroup=str(n),
                    line={"color": colour}, marker={"size": 5},
                    hovertemplate="position %{x}: |Δ| %{y:.3f}<extra></extra>",
                )
            )  # fmt: skip
        teacher = case.teacher_deltas
        if teacher:
            fig.add_trace(
                go.Scatter(
                    x=list(range(len(teacher))), y=teacher, mode="lines",
                    name=f"{name} (teacher-forced)", legendgroup=str(n),
                    line={"color": colour, "dash": "dot"},
                    hovertemplate="position %{x}: teacher-forced |Δ| %{y:.3f}<extra></extra>",
                )
            )  # fmt: skip
        if not isinstance(first, int):
            continue
        if parting is not None:
            drop, bound, label, said = parting
        else:
            drop, bound = 0.0, False
            label = said = f"{first}: one output ends here"
        fig.add_trace(
            go.Scatter(
                x=[first], y=[drop], mode="markers", showlegend=False, legendgroup=str(n),
                marker={
                    "symbol": "triangle-up" if bound else "x", "size": 13, "color": "#c62828"
                },
                hovertext=[esc.html_text(said)], hoverinfo="text",
            )
        )  # fmt: skip
        fig.add_vline(x=first, line_dash="dash", line_color="#c62828", opacity=0.4)
        fig.add_annotation(
            x=first, y=drop, text=esc.html_text(label), showarrow=True, arrowhead=2,
            arrowcolor=colour, ax=60, ay=-20 - 24 * n, xanchor="left",
            font={"size": 12, "color": colour}, bgcolor="rgba(255,255,255,0.85)",
        )  # fmt: skip
    fig.update_layout(
        title=f"|Δlogprob| per position: {_short(bad.commit)} vs the golden",
        xaxis_title="position in the golden's continuation",
        yaxis_title="|Δ logprob|",
        yaxis_rangemode="tozero",
        height=400,
    )
    return fig


def _accuracy(p: ProbeDoc) -> tuple[float, float, float] | None:
    for check in p.checks:
        details = check.details
        shown = check.name in showing("accuracy") and isinstance(details, EvalDetails)
        if shown and isinstance(details, EvalDetails) and details.metrics is not None:
            low, high = details.metrics.wilson95
            return details.metrics.accuracy, low, high
    return None


def accuracy_figure(doc: ResultDocument) -> go.Figure | None:
    """Each probe's eval accuracy with its 95% (Wilson) interval; the golden's as a line."""
    full = {p.commit: p for p in doc.decisive}  # a decisive build's suite, run in full
    points = [
        (i, p, a)
        for i, p in enumerate(doc.probes, 1)
        if (a := _accuracy(full.get(p.commit, p))) is not None
    ]
    if not points:
        return None
    fig = go.Figure()
    order = [f"{i}. {_short(p.commit)}" for i, p, _ in points]
    for verdict in Verdict:
        mine = [(i, p, a) for i, p, a in points if p.verdict is verdict]
        if not mine:
            continue
        fig.add_trace(
            go.Scatter(
                x=[f"{i}. {_short(p.commit)}" for i, p, _ in mine],
                y=[a[0] for _, _, a in mine],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [a[2] - a[0] for _, _, a in mine],
                    "arrayminus": [a[0] - a[1] for _, _, a in mine],
                },
                mode="markers",
                marker={"color": COLOURS[verdict], "size": 10},
                name=verdict.value,
            )
        )
    if doc.eval_power is not None:
        fig.add_hline(
            y=doc.eval_power.golden_accuracy,
            line_dash="dash",
            annotation_text="golden",
            line_color="#555",
        )
    data = doc.eval_power.data if doc.eval_power is not None else ""
    fig.update_layout(
        title="Eval accuracy per probe (95% interval)"
        + (f": {esc.html_text(data)}" if data else ""),
        xaxis={"categoryorder": "array", "categoryarray": order},
        yaxis_title="accuracy",
        yaxis_range=[0, 1.05],
        height=360,
    )
    return fig


def html_part(part: Part) -> str:
    """A first-screen part as HTML."""
    text = part.text if part.limit is None else cell_text(part.text, part.limit)
    said = esc.html_text(re.sub(r"\s+", " ", esc.plain(text)))  # on one line, spaces kept
    if part.style == "code":
        said = f"<code>{said}</code>"
    elif part.style == "mark":
        said = f"<b>{said}</b>"
    return f'<a href="{html.escape(part.href)}">{said}</a>' if part.href else said


def html_fact(fact: Fact) -> str:
    return "".join(html_part(p) for p in fact.parts)


def _summary(doc: ResultDocument) -> str:
    """The top of the page, from report.md's first-screen facts in its order: the answer and
    how sure it is, the ends, the lies assumed; then the images, dependency versions,
    backends, first token divergence, checks and doubted slots; where in the model."""
    rows = [html_fact(f) for f in answer_facts(doc)]
    rows += [f"⚠ {esc.html_text(note)}" for note in doc.notes]
    ctx = doc.context
    rows.append(
        f"good <code>{esc.html_text(ctx.good_ref or _short(doc.good))}</code> → bad "
        f"<code>{esc.html_text(ctx.bad_ref or _short(doc.bad))}</code>; "
        f"{len([p for p in doc.probes if not p.given])} probes over {doc.candidates} candidates"
        + (
            f" in {duration(doc.ended_at - doc.started_at)}"
            if doc.ended_at is not None and doc.started_at is not None
            else ""
        )
    )
    if said := cost_said(doc):
        rows.append(esc.html_text(said))
    rows.append(html_fact(lies_fact(doc)))
    items: list[tuple[Fact, list[Fact]]] = []
    for fact in screen(doc):  # an item under the line before (depth 1) nests in it
        if fact.depth and items:
            items[-1][1].append(fact)
        else:
            items.append((fact, []))

    def li(fact: Fact, under: list[Fact]) -> str:
        nested = "".join(li(f, []) for f in under)
        return (f'<li data-fact="{fact.key}">{html_fact(fact)}'
                + (f"<ul>{nested}</ul>" if nested else "") + "</li>")  # fmt: skip

    listed = f"<ul>{''.join(li(*item) for item in items)}</ul>" if items else ""
    found = doc.localization
    where = (
        f"where in the model: {html.escape(found.line)}" if found is not None and found.line else ""
    )
    return '<div class="summary">' + "<br>".join(rows) + listed + where + "</div>"


def table(probes: Sequence[ProbeDoc]) -> str:
    head = "<tr><th>#</th><th>commit</th><th>subject</th><th>verdict</th><th>reason</th>"
    head += "<th>seconds</th></tr>"
    rows = []
    for i, p in enumerate(probes, 1):
        total = p.timings.get("total")
        colour = COLOURS[p.verdict]
        rows.append(
            f"<tr><td>{i}</td><td><code>{_short(p.commit)}</code></td>"
            f"<td>{esc.html_text(p.subject[:80])}</td>"
            f'<td style="color:{colour}">{p.verdict.value}</td>'
            f"<td>{esc.html_text(p.reason[:160])}</td>"
            f"<td>{'' if total is None else f'{total:.1f}'}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def render_html(doc: ResultDocument) -> str:
    """The report of a run."""
    title = (
        f"{_short(doc.culprit.commit)} {doc.culprit.subject}"
        if doc.culprit is not None
        else doc.status.value
    )
    plots: list[Plot] = [
        ("narrowing", narrowing_figure(doc), "no probe landed inside the range"),
        ("timeline", timeline_figure(doc), "no probe ran in this run"),
        ("logprobs", _bad_logprobs(doc), "no logprobs check on the bad side"),
        ("accuracy", accuracy_figure(doc), "no eval check in this run"),
    ]
    return page(title, _summary(doc), plots, table(doc.probes))


def _bad_logprobs(doc: ResultDocument) -> go.Figure | None:
    """The first bad build's logprobs (its suite run in full after the search where its probe
    stopped early, `decisive`), else the bad end's, which always runs every check; the plot's
    title names the build."""
    figure = logprob_figure(bad_probe(doc))
    return figure if figure is not None else logprob_figure(doc.probe_of(doc.bad))


def page(title: str, summary: str, plots: Sequence[Plot], table: str) -> str:
    """One self-contained page; plotly's JavaScript is inlined once, before the first plot.
    A plot that has no data says why instead."""
    sections: list[str] = []
    first = True
    for name, fig, missing in plots:
        if fig is None:
            sections.append(f'<p class="note" id="plot-{name}-none">({missing})</p>')
            continue
        fig.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 50, "b": 50})
        sections.append(_figure_html(fig, f"plot-{name}", inline_js=first))
        if name in CAPTIONS:
            sections.append(f'<p class="note" id="plot-{name}-caption">{CAPTIONS[name]}</p>')
        first = False
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>llm-bisect: {esc.html_text(title)}</title>",
            f"<style>{_STYLE}</style>",
            f"<script>{_ON_ERROR}</script>",
            "</head><body>",
            f"<h1>llm-bisect: {esc.html_text(title)}</h1>",
            summary,
            f'<pre id="{ERRORS_ID}"></pre>',
            *sections,
            "<h2>Probes</h2>",
            table,
            '<p class="note">report.md in the same folder holds the evidence, the builds '
            "compared and the commands that reproduce the change.</p>",
            "</body></html>",
        ]
    )


def _figure_html(fig: go.Figure, div_id: str, *, inline_js: bool) -> str:
    text: str = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=inline_js,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
        default_height=f"{fig.layout.height or 380}px",
    )
    return text
