"""What may be written: secrets masked, long texts cut. Pure.

Everything llm-bisect writes or prints (journal, result.json, report.md,
golden.json, the terminal) passes through one `Scrub` at its write boundary,
so a server that echoes `HF_TOKEN` into a reply or a 500 body, or answers
with megabytes of text, cannot put either into a file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MASK = "***"
MIN_SECRET = 4
"""Shorter values are not masked: masking `1` or `no` would garble every text."""
MAX_TEXT = 20_000
"""Characters of one text kept in a document; longer ones keep their head, length and hash."""


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value (4+ characters) in a text by ***."""
    for secret in sorted((s for s in secrets if len(s) >= MIN_SECRET), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """The text, or its first `limit` characters with its whole length and a hash."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[:limit]}… [cut: {len(text)} characters in all, sha256 {digest}]"


@dataclass(frozen=True)
class Scrub:
    """The secrets of one run, and how to keep them (and oversized texts) out of output."""

    secrets: tuple[str, ...] = ()
    max_text: int = MAX_TEXT

    def with_secrets(self, more: Iterable[str]) -> Scrub:
        found = {*self.secrets, *(s for s in more if len(s) >= MIN_SECRET)}
        return Scrub(tuple(sorted(found, key=len, reverse=True)), self.max_text)

    def text(self, text: str) -> str:
        """A text with every secret masked (not cut: terminal lines and logs stay whole)."""
        return redact(text, self.secrets) if self.secrets else text

    def doc(self, value: Any) -> Any:
        """A JSON value with every string (keys too) masked and cut to `max_text`."""
        if isinstance(value, str):
            return clip(self.text(value), self.max_text)
        if isinstance(value, dict):
            return {self.doc(str(k)): self.doc(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.doc(v) for v in value]
        return value
