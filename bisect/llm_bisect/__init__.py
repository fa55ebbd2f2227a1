"""llm-bisect: find the commit that silently broke an LLM serving engine."""

from __future__ import annotations

__version__ = "0.1.0"
