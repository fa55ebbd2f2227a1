"""Every pattern of the parsers that read what a server or a node wrote (the startup log,
collect_env) is linear: checked by analysing the patterns, not by timing them.

The rule is structural: no repeat without a bound, except over digits. A bounded repeat
caps the work at each position, so a line costs at most its length times a constant; a
pattern like `Using ([\\w ]+?) for` on a line of 670 "Using " once took 0.19 s per 4 KB
line (the 16 MiB cap allowed some 13 minutes), and collect_env's `(.+?)...\\s*$` 8 s on one
16 KB line. regexploit (PyPI) checks the same patterns for exponential backtracking.
"""

from __future__ import annotations

import re
from re import (
    _constants as C,  # type: ignore[attr-defined]
    _parser as P,  # type: ignore[attr-defined]
)
from typing import Any

import pytest

from llm_bisect import collectenv, fingerprint, startup

PATTERNS: list[re.Pattern[str]] = [
    *(r.pattern for r in fingerprint._RULES),
    *(r.unless for r in fingerprint._RULES if r.unless is not None),
    fingerprint._NOT_ATTENTION,
    fingerprint._WORTH_READING,
    fingerprint._SOURCE,
    fingerprint._ANSI,
    *(m.pattern for m in startup.MILESTONES),
    *(p for _, p in startup._REPORTED),
    startup._HIT,
    startup._MISS,
    startup._STAMP,
    startup._ANSI,
    collectenv._KEY,
    collectenv._PIP,
    collectenv._GPU,
]


def _digits_only(body: Any) -> bool:
    items = list(body)
    return len(items) == 1 and items[0] == (C.IN, [(C.CATEGORY, C.CATEGORY_DIGIT)])


def unbounded(parsed: Any) -> list[str]:
    """The repeats without an upper bound in a parsed pattern, other than over digits."""
    found = []
    for op, arg in parsed:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", None)):
            _, high, body = arg
            if high == C.MAXREPEAT and not _digits_only(body):
                found.append(str(list(body))[:80])
            found += unbounded(body)
        elif op == C.SUBPATTERN:
            found += unbounded(arg[-1])
        elif op == C.BRANCH:
            for branch in arg[1]:
                found += unbounded(branch)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            found += unbounded(arg[1])
    return found


def test_the_analyser_finds_the_patterns_that_were_quadratic() -> None:
    """It must flag what it is there to flag (else the test below cannot fail)."""
    for old in (
        r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?\s*$",
        r"Using (?P<moe_backend>[\w\- ]+?) (?:backend |kernels? )?for (?:fused )?MoE",
        r"^([A-Za-z][\w /().-]*?)\s*:\s?(.*)$",
    ):
        assert unbounded(P.parse(old)), old
    assert not unbounded(P.parse(r"took (?P<s>\d+(?:\.\d+)?) s"))


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.pattern[:40])
def test_every_parser_pattern_is_bounded(pattern: re.Pattern[str]) -> None:
    assert not unbounded(P.parse(pattern.pattern)), pattern.pattern


def test_regexploit_finds_no_backtracking_in_them() -> None:
    from regexploit.ast.sre import SreOpParser  # type: ignore[import-untyped]
    from regexploit.redos import find  # type: ignore[import-untyped]

    found = [(p.pattern, r) for p in PATTERNS for r in find(SreOpParser().parse_sre(p.pattern))]
    assert not found, found
