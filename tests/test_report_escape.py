"""escape: any text, written where it goes, is shown as written and obeyed nowhere. Property
tests over hostile pieces (markup, fences, mentions, autolinks, terminal escapes, controls),
rendered as GitHub renders markdown, parsed as XML, read back by `sh`."""

from __future__ import annotations

import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import HOSTILE_LINE, github_render, shell_words
from llm_bisect import escape as esc

PIECES = [
    "```", "~~~", "`", "``", "</details>", "<details>", "<img src=x onerror=alert(1)>", "<!--",
    "-->", "<https://evil.example>", "@octocat", "@org/team", "a@b.co", "&#64;x", "&amp;", "&",
    "http://evil.example/x", "https://evil.example", "www.evil.example", "WWW.evil.example",
    "[x](javascript:alert(1))", "![t](https://t.example/p.png)", "[^1]", "[x]: /u", "|", "\\",
    "\\|", "*", "**", "_", "__", "~", "~~", "$", "$$", "#", "##", " #", "-", "---", "+", "=",
    "1.", "2)", ">", ":", "//", " ", "  ", "\t", "\n", "\r", "\r\n", "\x00", "\x0b", "\x7f",
    "\x9b31m", "\x1b[31m", "\x1b]8;;https://evil.example\x07", "\x1b]52;c;eA==\x1b\\", "\x1b",
    "\u202e", "\u2066", "\ufffe", "a", "b_c", "word", "é", "日本", "\U0001f600", "(", ")", "'",
    '"', ";", "$(id)", "${IFS}", "!", "?", "%", "{", "}",
]  # fmt: skip
hostile = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=3)), max_size=14).map(
    "".join
)
FAST = settings(max_examples=200, deadline=None)


def flat(value: str) -> str:
    """The text on one line, as a reader sees it (zero-width spaces are not seen)."""
    return " ".join(esc.plain(value).split()).replace(esc.ZWSP, "")


def seen(value: str) -> str:
    return value.replace(esc.ZWSP, "")


@FAST
@given(hostile)
def test_text_is_shown_as_written_and_makes_no_markup(value: str) -> None:
    for md in (f"x {esc.text(value)} y", esc.text(value)):
        shown = github_render(md)
        assert shown.problems == [], (value, md)
        assert shown.fences == [] and shown.headings == []
    assert github_render(f"x {esc.text(value)} y").text.strip("\n") == f"x {flat(value)} y"
    if flat(value):
        assert github_render(esc.text(value)).text.strip("\n") == flat(value)


@FAST
@given(hostile, hostile)
def test_a_cell_stays_one_cell(value: str, other: str) -> None:
    md = "\n".join(
        [
            "| a | b | c |",
            "|---|---|---|",
            f"| {esc.cell(value, 10_000)} | {esc.code(other, table=True)} | z |",
        ]
    )
    assert github_render(md).problems == [], md
    code = flat(other) if "\\|" in esc.plain(other) else seen(esc.plain(other) or " ")
    assert _cells(md) == [flat(value), code, "z"], md


def _cells(md: str) -> list[str]:
    """The body row's cells as rendered text."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    body = tokens[[t.type for t in tokens].index("tbody_open") :]
    cells: list[str] = []
    for i, t in enumerate(body):
        if t.type == "td_open":
            inline = body[i + 1]
            cells.append(
                "".join(c.content for c in inline.children or []).replace(esc.ZWSP, "")
                if inline.type == "inline"
                else ""
            )
    return cells


@FAST
@given(hostile)
def test_a_code_span_holds_the_text_whatever_backticks_it_holds(value: str) -> None:
    md = f"x {esc.code(value)} y"
    shown = github_render(md)
    assert shown.problems == [], md
    assert shown.text == seen(f"x {esc.plain(value) or ' '} y\n")


@FAST
@given(hostile, st.sampled_from(["", "bash"]))
def test_a_fence_holds_every_line_whatever_fences_it_holds(value: str, info: str) -> None:
    md = "\n".join(
        ["<details><summary>log</summary>", "", *esc.fence(value, info), "", "</details>"]
    )
    shown = github_render(md)
    assert shown.problems == [], md
    body = esc.plain(value, lines=True).rstrip("\n")
    assert shown.fences == [(info, body + "\n")]


@FAST
@given(hostile)
def test_summary_text_is_text_inside_raw_html(value: str) -> None:
    md = f"<details><summary><code>abc</code>: {esc.summary(value)}</summary>\n\n</details>"
    shown = github_render(md)
    assert shown.problems == [], md
    assert shown.text.strip() == f"abc: {flat(value)}".strip()


@FAST
@given(hostile)
def test_xml_text_is_well_formed_and_keeps_what_xml_allows(value: str) -> None:
    element = ET.Element("failure", message=esc.xml_text(value))
    element.text = esc.xml_text(value)
    parsed = ET.fromstring(ET.tostring(element, "unicode"))  # raises when not well-formed
    assert (parsed.text or "") == esc.xml_text(value).replace("\r", "\n")
    assert parsed.get("message") is not None


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    argv=st.lists(hostile.map(lambda s: s.replace("\x00", "")), min_size=1, max_size=4),
    said=hostile,
)
def test_sh_reads_a_printed_command_back_as_its_words(
    argv: list[str], said: str, tmp_path: Path
) -> None:
    cwd = tmp_path / "sh"
    cwd.mkdir(exist_ok=True)
    line = esc.shell(argv) + "\n" + esc.comment(said)
    assert shell_words(line, cwd) == argv
    assert list(cwd.iterdir()) == []


_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_value = hostile.map(lambda s: s.replace("\x00", ""))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    env=st.dictionaries(
        st.one_of(_name, _value.filter(lambda s: s and "=" not in s)), _value, max_size=3
    ),
    argv=st.lists(_value, min_size=1, max_size=3),
)
def test_sh_reads_a_command_with_its_environment_back_as_its_words(
    env: dict[str, str], argv: list[str], tmp_path: Path
) -> None:
    """`NAME=value` before the command, whatever names and values hold; `env --` first when
    a name is none `sh` can assign. Nothing in them runs."""
    cwd = tmp_path / "sh"
    cwd.mkdir(exist_ok=True)
    words = shell_words(esc.env_shell(env, argv, ()), cwd)
    shown = [f"{name}={value}" for name, value in sorted(env.items())]
    plain = all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) for name in env)
    assert words == [*([] if plain else ["env", "--"]), *shown, *argv]
    assert list(cwd.iterdir()) == []


def test_the_environment_a_command_line_sets_is_the_one_it_ran_with(tmp_path: Path) -> None:
    """Pasted into `sh`, the line runs its command with the values shown, and a secret's from
    the reader's environment: its value is in no line."""
    env = {"NCCL_MNNVL_ENABLE": "1", "SPACED": "a b $(touch pwned)", "HF_TOKEN": "hf_theirs"}
    line = esc.env_shell(env, ["env", "-0"], {"HF_TOKEN"})
    assert "hf_theirs" not in line
    done = subprocess.run(
        ["sh", "-c", line], cwd=tmp_path, env={"PATH": os.defpath, "HF_TOKEN": "hf_mine"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    seen = dict(item.split("=", 1) for item in done.stdout.split("\0") if item)
    assert seen["NCCL_MNNVL_ENABLE"] == "1" and seen["SPACED"] == "a b $(touch pwned)"
    assert seen["HF_TOKEN"] == "hf_mine" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("https://github.com/vllm-project/vllm", True),
        ("http://git.example:8080/group/sub/engine/", True),
        ("https://gitlab.com/a/b.c-d_e", True),
        ("javascript:alert(1)", False),
        ("JAVASCRIPT:alert(1)", False),
        ("javascript://github.com/%0aalert(1)", False),
        (" https://github.com/a/b", False),
        ("https://github.com/a/b\n", False),
        ("data:text/html,x", False),
        ("//github.com/a/b", False),
        ('https://github.com/a/b"onmouseover="x', False),
        ("https://github.com/a/b)<img src=x>", False),
        ("https://user:pw@github.com/a/b", False),
        ("https://github.com/a/b?x=1", False),
        ("", False),
    ],
)
def test_only_http_addresses_of_repositories_are_safe(url: str, safe: bool) -> None:
    assert esc.safe_url(url) == (url if safe else "")


def test_terminal_escapes_and_controls_go_whole() -> None:
    assert esc.plain("a\x1b[31mred\x1b[0m b\x1b]8;;https://x\x07link\x1b]8;;\x07 c\x9b2Jd") == (
        "ared blink cd"
    )
    assert esc.plain("x\x00\x0b\x7f\u202ey\r\nz\rw", lines=True) == "xy\nz\nw"
    assert esc.plain("\ud800") == "\ufffd"
    assert "\x1b" not in esc.text(HOSTILE_LINE) and "\x00" not in esc.xml_text(HOSTILE_LINE)
