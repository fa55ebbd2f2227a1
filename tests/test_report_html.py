"""report.html: written by a real run, opened in real headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from helpers import HOSTILE_LINE, HOSTILE_LOG, History, github_render
from llm_bisect.report.documents import ResultDocument
from llm_bisect.report.html import ERRORS_ID, render_html
from llm_bisect.report.markdown import render_markdown
from test_cli import invoke
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
    result = golden_result()
    result["context"]["repo_url"] = url
    doc = ResultDocument.model_validate(result)
    page = render_html(doc)
    assert (
        hrefs(page) == [] and "<img" not in page.split("<h2>Probes</h2>")[0].split("</script>")[-1]
    )
    assert github_render(render_markdown(doc)).problems == []  # no link at all
