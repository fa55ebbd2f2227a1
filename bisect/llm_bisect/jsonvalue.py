"""`Json`: a JSON value as json.loads gives it, for a document whose shape is the user's
(a context, a config's extra fields, a build's facts), read by checking each value it
uses. The ground floor: standard library only (the simulated engine imports it too)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

Json: TypeAlias = "str | int | float | bool | Sequence[Json] | Mapping[str, Json] | None"
"""Containers as Sequence and Mapping: a list[str] or dict[str, str] is one too."""
