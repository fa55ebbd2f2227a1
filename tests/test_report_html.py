"""report.html: written by a real run, opened in real headless Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from helpers import HOSTILE_LINE, HOSTILE_LOG, History, github_render
from llm_bisect.checks.golden import Golden, Sections
from llm_bisect.checks.logprobs import LogprobsCheck, LogprobsDetails
from llm_bisect.client import OpenAIClient
from llm_bisect.model import Verdict
from llm_bisect.report.documents import CheckDoc, ProbeDoc, ResultDocument
from llm_bisect.report.html import ERRORS_ID, logprob_figure, render_html, timeline_figure
from llm_bisect.report.markdown import divergences, render_markdown
from llm_bisect.startup import PHASE_LABELS, phases, read_marks
from test_cli import invoke
from test_client import sim
from test_report import golden_result

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PLOTS = ("narrowing", "timeline", "logprobs", "accuracy")


def browser() -> str:
    """Headless Chromium; skip without one, but fail under CI, which installs it."""
    found = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install chromium (scripts/test does)")
        pytest.skip("no chromium on this machine")
    return found


def open_in_chromium(page: Path, tmp_path: Path, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (virtual time: no guessed wait)."""
    args = [
        browser(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=10000",
    ]
    if screenshot is not None:
        shot = subprocess.run(
            [*args, "--window-size=1200,2400", f"--screenshot={screenshot}", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert screenshot.exists(), shot.stderr[-2000:]
    done = subprocess.run(
        [*args, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_report_html_renders_every_plot_in_chromium(tmp_path: Path, history: Any) -> None:
    """...with subjects, replies and logs that are markup: shown as text, never obeyed."""
    subject = HOSTILE_LINE.replace("\x00", "")
    h: History = history(
        {9: "degenerate-reasoning", 4: "crash-on-start", 5: "none"},
        n=16,
        subjects={i: f"{subject} (#2400{i})" for i in range(1, 17)},
        changes={
            4: {"log_lines": HOSTILE_LOG},
            5: {"log_lines": []},
            9: {"hostile": {"say": HOSTILE_LINE}},
        },
    )
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config(candidates={"url": URL})), "--out", str(out))
    assert code == 0, output
    page = out / "report.html"
    text = page.read_text()
    assert re.search(r"<script[^>]*\bsrc=", text) is None  # everything inline: no network
    dom = open_in_chromium(page, tmp_path, tmp_path / "report.png")
    errors = re.search(rf'<pre id="{ERRORS_ID}">(.*?)</pre>', dom, re.S)
    assert errors is not None and errors.group(1).strip() == ""
    assert "<img" not in dom and "&lt;img src=x onerror=alert(1)&gt; @octocat" in dom
    assert hrefs(dom) and all(href.startswith(URL + "/") for href in hrefs(dom))
    for name in PLOTS:  # each plot drew its SVG
        div = re.search(rf'<div id="plot-{name}".*?class="main-svg"', dom, re.S)
        assert div is not None, f"plot {name} did not render"
    result = ResultDocument.model_validate_json((out / "result.json").read_bytes())
    assert result.narrowing[-1].hi - result.narrowing[-1].lo == 1  # narrowed to one
    assert h.shas[9][:12] in dom
    # the golden this run recorded from the good end keeps that build's fingerprint
    kept = json.loads((out / "golden.json").read_text())["fingerprint"]
    assert kept["server"]["system_fingerprint"] == f"sim-0.1.0-{h.shas[0][:12]}", kept


def test_a_plot_without_data_says_why(tmp_path: Path, history: Any) -> None:
    h: History = history({5: "degenerate-reasoning"}, n=8)
    out = tmp_path / "out"
    config = h.config(checks=[{"type": "canary"}])
    code, output = invoke("run", str(config), "--out", str(out), "--good", h.shas[0])
    assert code == 0, output
    doc = ResultDocument.model_validate_json((out / "result.json").read_bytes())
    page = render_html(doc)
    assert 'id="plot-accuracy-none">(no eval check in this run)' in page
    assert 'id="plot-logprobs-none"' in page and 'id="plot-narrowing"' in page


URL = "https://github.com/vllm-project/vllm"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [(tag, name, value or "") for name, value in attrs]


def hrefs(page: str) -> list[str]:
    """Every link's address (what a script holds is not parsed)."""
    tags = _Tags()
    tags.feed(page)
    return [value for tag, name, value in tags.found if name == "href"]


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(document.domain)//",
        "JaVaScRiPt:alert(1)",
        " javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:msgbox(1)",
        'https://github.com/o/r"><img src=x onerror=alert(1)>',
        "https://github.com/o/r) [x](javascript:alert(1)",
    ],
)
def test_a_repository_address_is_a_link_only_over_http(url: str) -> None:
    """A result.json whose repository address is no http(s) address of a repository (one
    written before candidates.url was checked, or edited) gives reports without its links."""
    result = golden_result().model_dump(mode="json")
    result["context"]["repo_url"] = url
    doc = ResultDocument.model_validate(result)
    page = render_html(doc)
    assert (
        hrefs(page) == [] and "<img" not in page.split("<h2>Probes</h2>")[0].split("</script>")[-1]
    )
    assert github_render(render_markdown(doc)).problems == []  # no link at all


def diverging_probe(fault: str = "degenerate-reasoning") -> ProbeDoc:
    """A probe whose logprobs check ran on the simulator against a healthy build's golden:
    with `degenerate-reasoning` the greedy tokens part at position 2 ('I'm doing well' →
    'I'm doing we'), while the teacher-forced scores of the golden's tokens are unchanged."""
    check = LogprobsCheck([DIVERGING_PROMPT])
    with sim() as url, OpenAIClient(url) as api:
        section = check.record(api)
    golden = Golden(version=2, commit="a" * 40, checks=Sections(logprobs=section))
    with sim(fault) as url, OpenAIClient(url) as api:
        result = check.run(api, golden)
    return ProbeDoc(
        commit="b" * 40,
        verdict=Verdict.BAD if not result.passed else Verdict.GOOD,
        checks=[CheckDoc.model_validate(result.to_json())],
    )


DIVERGING_PROMPT = "hello how are you"


def test_the_logprob_plot_shows_where_the_tokens_part() -> None:
    """A flat zero line hid a build whose tokens part at position 2: the plot's data is not
    all zero, position 2 is marked, and the two tokens are named there."""
    bad = diverging_probe()
    assert isinstance(bad.checks[0].details, LogprobsDetails)
    (case,) = bad.checks[0].details.cases
    assert case.first_divergence == 2 and set(case.teacher_deltas) == {0.0}
    fig = logprob_figure(bad)
    assert fig is not None
    ys = [y for trace in fig.data for y in (trace.y or ()) if y is not None]
    assert any(y > 0 for y in ys), ys
    marked = [t for t in fig.data if t.x is not None and list(t.x) == [2]]
    assert marked, [list(t.x or ()) for t in fig.data]
    shown = html.unescape(" ".join(str(a.text) for a in fig.layout.annotations))
    assert "' well,'" in shown and "' we'" in shown, shown


def test_top_k_alternatives_show_their_text() -> None:
    """report.md printed every top-k alternative as '' (the server's /detokenize did not
    know them): each shows its id and its text."""
    bad = diverging_probe()
    assert isinstance(bad.checks[0].details, LogprobsDetails)
    (case,) = bad.checks[0].details.cases
    assert case.divergence is not None
    tops = case.divergence.golden.top + case.divergence.candidate.top
    assert len(tops) > 2 and all(t.text for t in tops), tops
    md = "\n".join(divergences(bad))
    assert "''" not in md, md
    assert all(t.token in md for t in tops), md


def test_the_timeline_splits_the_wait_until_ready_into_the_phases_the_log_names() -> None:
    """A probe whose server log named its phases shows them in place of one `wait until
    ready` bar, back to back from launch to ready, compile among them."""
    entry = json.loads((Path(__file__).parent / "corpus" / "vllm_startup_phases.json").read_text())
    doc = golden_result()
    t = doc.probes[0].timings
    started = phases(read_marks(entry["logs"][0]["lines"]), t["launch"], t["ready"])
    assert started is not None
    first_probe = doc.probes[0].model_copy(update={"startup": started})
    doc = doc.model_copy(update={"probes": [first_probe, *doc.probes[1:]]})
    fig = timeline_figure(doc)
    assert fig is not None
    first = [t for t in fig.data if any("1. " in str(y) for y in t.y)]
    shown = {t.name: (float(t.base[0]), float(t.base[0]) + float(t.x[0])) for t in first}
    assert "wait until ready" not in shown
    offset = shown["look up the artifact"][0]  # where the probe's bar begins
    names = [PHASE_LABELS[p.name] for p in started.phases]
    assert [n for n in shown if n in names] == names
    for p in started.phases:
        assert shown[PHASE_LABELS[p.name]] == (offset + p.start, offset + p.end)
    assert "torch.compile" in PHASE_LABELS["compile"]
    # the other probes, without a startup, keep their one bar
    assert any(t.name == "wait until ready" for t in fig.data)
