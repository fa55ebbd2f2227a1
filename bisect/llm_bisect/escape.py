"""Text from outside (commit subjects and authors, refs, paths, server replies, log lines)
escaped for where it is written, so that it is read and never obeyed. Pure.

    plain      every writer's first step: terminal escape sequences and control characters
               out (newlines and tabs kept where lines are)
    text       GitHub markdown inline text: no emphasis, link, image, raw HTML, entity, math,
               autolink or @mention of its own
    cell       the same on one line cut to a length (a table cell: `|` is escaped too)
    code       a code span, fenced by more backticks than any run of them inside
    fence      a fenced block, fenced by more backticks than any run of them inside
    summary    text inside the raw HTML report.md writes (`<summary>`): HTML-escaped, no @mention
    html_text  text in report.html
    xml_text   text in JUnit XML: only what XML 1.0 allows
    shell      a command line `sh` reads back as the same words; `env_shell` with its
               environment (secrets by name); `comment` for shell comments
    safe_url   an http(s) address of a repository, else ""

GitHub turns `@name` into a mention (and a notification) and `a@b.c` into a mail link even
where markdown escapes apply, so a zero-width space follows such an `@`: it shows as
written and is neither.
"""

from __future__ import annotations

import html
import re
import shlex
from collections.abc import Collection, Mapping, Sequence

_ESCAPES = re.compile(
    r"""
    \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?      # OSC (hyperlinks, titles, clipboard), to BEL or ST
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?         # DCS, SOS, PM, APC strings
    | \x1b\[[0-?]*[\x20-/]*[@-~]            # CSI (colours, cursor, erase)
    | \x1b[\x20-/]*[0-~]                    # other escape sequences
    | \x9b[0-?]*[\x20-/]*[@-~]              # CSI as one C1 character
    | \x9d[^\x07\x9c]*[\x07\x9c]?           # OSC as one C1 character
    """,
    re.VERBOSE,
)
_CONTROLS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]"
)
"""C0 and C1 controls but newline, tab and carriage return; the bidirectional overrides and
isolates (text that reads other than it runs); the two non-characters XML forbids."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_MARKUP = frozenset("\\`*[]<>|&~$")
"""Characters that begin markup anywhere in a line of GitHub markdown."""
_AT = re.compile(r"@(?=[A-Za-z0-9])")
_SCHEME = re.compile(r":(?=//)")
_WWW = re.compile(r"(?i)(?<=\bwww)\.")
_BLOCK = re.compile(r"^(?:[-+=#]|\d+(?=[.)]))")
"""What makes a line a heading, a list item or a setext underline at its start."""
_CLOSING = re.compile(r"#+$")
"""What a heading drops at its end."""
_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/[A-Za-z0-9._~%+-]+)*/?", re.I)
ZWSP = "\u200b"


def plain(value: object, *, lines: bool = False) -> str:
    """The text without terminal escape sequences, control characters or lone surrogates;
    with `lines`, newlines (a carriage return is one) and tabs stay, else they are spaces."""
    text = _ESCAPES.sub("", str(value))
    text = _SURROGATE.sub("\ufffd", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROLS.sub("", text)
    return text if lines else text.replace("\n", " ").replace("\t", " ")


def _one_line(value: object, limit: int | None) -> str:
    flat = " ".join(plain(value).split())
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"


def _unmention(text: str) -> str:
    return _AT.sub("@" + ZWSP, text)


def text(value: object, limit: int | None = None) -> str:
    """Inline markdown that shows the text as it is (on one line, cut to `limit`)."""
    flat = _one_line(value, limit)
    out = []
    for i, c in enumerate(flat):
        inner = 0 < i < len(flat) - 1 and flat[i - 1].isalnum() and flat[i + 1].isalnum()
        if c in _MARKUP or (c == "_" and not inner):  # snake_case cannot open emphasis
            out.append("\\" + c)
        elif c == "@" and i + 1 < len(flat) and flat[i + 1].isascii() and flat[i + 1].isalnum():
            out.append("\\@" + ZWSP)
        else:
            out.append(c)
    escaped = "".join(out)
    escaped = _WWW.sub("\\.", _SCHEME.sub("\\:", escaped))  # no autolink of URLs
    escaped = _CLOSING.sub(lambda m: "\\#" * len(m[0]), escaped)
    return _BLOCK.sub(lambda m: m[0] + "\\" if m[0][0].isdigit() else "\\" + m[0], escaped)


def cell(value: object, limit: int = 90) -> str:
    """One table cell (or any one-line excerpt) of the text, cut to `limit` characters."""
    return text(value, limit)


def _fence_for(body: str, least: int) -> str:
    runs = re.findall(r"`+", body)
    return "`" * max(least, max((len(r) + 1 for r in runs), default=1))


def code(value: object, *, table: bool = False) -> str:
    """A code span of the text on one line; `table`: it sits in a table cell."""
    body = plain(value)
    if table and "|" in body:
        if "\\|" in body:  # a table keeps no backslash before a pipe inside code
            return text(body)
        body = body.replace("|", "\\|")
    fence = _fence_for(body, 1)
    pad = body.startswith("`") or body.endswith("`")
    pad = pad or (body.startswith(" ") and body.endswith(" ") and bool(body.strip()))
    space = " " if pad else ""
    return f"{fence}{space}{body or ' '}{space}{fence}"


def fence(value: object, info: str = "") -> list[str]:
    """The lines of a fenced block that holds the text as it is, whatever lines it holds."""
    body = plain(value, lines=True).rstrip("\n")
    bar = _fence_for(body, 3)
    return [bar + info, *body.split("\n"), bar]


def summary(value: object, limit: int | None = None) -> str:
    """Text inside raw HTML in report.md (no markdown applies there; GitHub's mentions do)."""
    return _unmention(html.escape(_one_line(value, limit)))


def html_text(value: object) -> str:
    """Text in report.html."""
    return html.escape(plain(value, lines=True))


_XML_FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    """Text an XML 1.0 document may hold (the XML writer escapes &, < and > itself)."""
    return _XML_FORBIDDEN.sub("", plain(value, lines=True))


def shell(argv: Sequence[str]) -> str:
    """A command line that `sh` reads back as these words, whatever they hold."""
    return shlex.join(argv)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_shell(env: Mapping[str, str], argv: Sequence[str], secret: Collection[str]) -> str:
    """A command line with the environment it ran with, as `sh` reads it back: `NAME=value`
    words before the command, each value quoted. A secret's value is never written:
    `NAME="$NAME"` takes the reader's own. A name `sh` cannot assign goes through `env --`."""

    def value(name: str) -> str:
        if name not in secret:
            return shlex.quote(env[name])
        return f'"${name}"' if _NAME.fullmatch(name) else "'***'"

    words = [shlex.quote(f"{name}=") + value(name) for name in sorted(env)]
    if not all(_NAME.fullmatch(name) for name in env):
        words = ["env", "--", *words]
    return " ".join([*words, shell(argv)])


def comment(value: object) -> str:
    """Shell comment lines that hold the text (a newline in it starts another comment)."""
    return "\n".join(f"# {line}".rstrip() for line in plain(value, lines=True).split("\n"))


def safe_url(url: str) -> str:
    """The address when it is an http(s) address of a repository (host, port, path of
    plain segments), else "": no other scheme, no quote, space, bracket or markup."""
    return url if _URL.fullmatch(url) else ""
