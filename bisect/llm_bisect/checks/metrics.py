"""Text metrics that tell degenerate output from natural text. Pure.

Degenerate output from a broken kernel looks like `G now now now now ...`:
one token or a short n-gram repeated far beyond what prose, code, lists or
tables produce. Short answers ("4", "Paris.") are too short to judge and
always pass.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections import Counter
from dataclasses import dataclass

_TOKEN = re.compile(r"\w+|[^\w\s]+")

MIN_TOKENS = 16
"""Below this many tokens repetition metrics say nothing."""
MAX_RUN = 8
"""A token repeated back to back this often is degenerate (natural text: 1-3)."""
MAX_TOP_SHARE = 0.4
"""Most frequent word token above this share of all tokens (prose: under 0.1)."""
MIN_COMPRESSION = 0.15
"""zlib ratio under this on 200+ characters (prose: 0.4-0.7)."""
MIN_DISTINCT2 = 0.3
"""Distinct bigrams over bigrams under this on 30+ bigrams (prose: above 0.8)."""
MAX_NGRAM_COVER = 0.5
"""Share of all tokens covered by the most frequent 2- to 4-gram (prose: under 0.15)."""


def tokens(text: str) -> list[str]:
    """Words and runs of punctuation, lowercased."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class TextMetrics:
    """How repetitive one text is."""

    n_tokens: int
    max_run: int
    """Longest run of one token repeated back to back."""
    top_token: str
    top_share: float
    """Share of the most frequent word token (punctuation excluded)."""
    compression: float
    """zlib-compressed size over raw size; low means repetitive."""
    distinct2: float
    """Distinct bigrams over all bigrams."""
    top_ngram: str = ""
    ngram_cover: float = 0.0
    """Share of all tokens covered by occurrences of the most frequent 2- to 4-gram."""

    def degenerate_reasons(self, n_chars: int) -> list[str]:
        """Why this text looks degenerate; empty when it looks natural."""
        reasons = []
        if n_chars >= 200 and self.compression < MIN_COMPRESSION:
            reasons.append(f"compression ratio {self.compression:.2f}")
        if self.n_tokens < MIN_TOKENS:
            return reasons
        if self.max_run >= MAX_RUN:
            reasons.append(f"'{self.top_token}' repeated {self.max_run} times in a row")
        if self.top_share > MAX_TOP_SHARE:
            reasons.append(f"'{self.top_token}' is {self.top_share:.0%} of all tokens")
        if self.ngram_cover > MAX_NGRAM_COVER:
            reasons.append(f"'{self.top_ngram}' repeats over {self.ngram_cover:.0%} of the text")
        if self.n_tokens > 30 and self.distinct2 < MIN_DISTINCT2:
            reasons.append(f"distinct-2 {self.distinct2:.2f}")
        return reasons


def measure(text: str) -> TextMetrics:
    """Compute the repetition metrics of a text."""
    toks = tokens(text)
    max_run, run = (1, 1) if toks else (0, 0)
    run_token = toks[0] if toks else ""
    for prev, cur in itertools.pairwise(toks):
        run = run + 1 if cur == prev else 1
        if run > max_run:
            max_run, run_token = run, cur
    words = [t for t in toks if t[0].isalnum() or t[0] == "_"]
    counts = Counter(words)
    top, top_n = counts.most_common(1)[0] if counts else ("", 0)
    raw = text.encode()
    bigrams = list(itertools.pairwise(toks))
    top_ngram, cover = _ngram_cover(toks)
    return TextMetrics(
        n_tokens=len(toks),
        max_run=max_run,
        top_token=run_token if max_run >= MAX_RUN else top,
        top_share=top_n / len(toks) if toks else 0.0,
        compression=len(zlib.compress(raw, 9)) / len(raw) if raw else 1.0,
        distinct2=len(set(bigrams)) / len(bigrams) if bigrams else 1.0,
        top_ngram=top_ngram,
        ngram_cover=cover,
    )


def _ngram_cover(toks: list[str]) -> tuple[str, float]:
    """The 2- to 4-gram whose non-overlapping repeats cover most of the tokens, and how much."""
    best, best_cover = "", 0.0
    for n in (2, 3, 4):
        if len(toks) < 2 * n:
            continue
        grams = Counter(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))
        gram, count = grams.most_common(1)[0]
        if count < 3:
            continue
        cover = min(1.0, count * n / len(toks))
        if cover > best_cover:
            best, best_cover = " ".join(gram), cover
    return best, best_cover


def degeneration(text: str | None) -> list[str]:
    """Why a text looks degenerate; empty for natural text, short text or None."""
    if not text:
        return []
    return measure(text).degenerate_reasons(len(text))


def excerpt(text: str | None, limit: int = 160) -> str:
    """A one-line excerpt for evidence."""
    if text is None:
        return "null"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
