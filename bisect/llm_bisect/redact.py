"""Keep secrets out of everything llm-bisect writes. Pure."""

from __future__ import annotations

from collections.abc import Iterable

MASK = "***"


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value (4+ characters) in a text by ***."""
    for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
