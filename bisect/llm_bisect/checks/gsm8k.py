"""GSM8K scoring, as the common harnesses do it. Pure.

Answer extraction: `#### N`, else `The answer is N`, else the last number.
Accuracy comes with a Wilson 95% interval, so 50 problems are not read as
more certain than they are.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

_NUMBER = r"-?[\d,]*\.?\d+"
_HASHES = re.compile(rf"####\s*\$?({_NUMBER})")
_THE_ANSWER = re.compile(rf"[Tt]he (?:final )?answer is:?\s*\$?\\?(?:boxed\{{)?({_NUMBER})")
_ANY = re.compile(_NUMBER)

Z95 = 1.959964
Z_ALPHA_05_ONE_SIDED = 1.644854
Z_POWER_80 = 0.841621
DETECTABLE_WARN = 0.05
"""Warn when an eval cannot see an accuracy drop this large (5 points)."""


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str
    """The reference number, as text."""


def _norm(number: str) -> str:
    text = number.replace(",", "").rstrip(".")
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value == int(value) else str(value)


def extract(text: str | None) -> str | None:
    """The number a completion answers with; None when it holds none."""
    if not text:
        return None
    for pattern in (_HASHES, _THE_ANSWER):
        found = pattern.findall(text)
        if found:
            return _norm(found[-1])
    numbers = _ANY.findall(text)
    return _norm(numbers[-1]) if numbers else None


def load_problems(path: Path | None = None, limit: int | None = None) -> list[Problem]:
    """A GSM8K-format JSONL (`question`, `answer` ending in `#### N`); default: the bundled set."""
    if path is None:
        text = resources.files("llm_bisect.data").joinpath("gsm8k_mini.jsonl").read_text()
    else:
        text = path.read_text(encoding="utf-8")
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            raise ValueError(f"line {number}: not a JSON object") from None
        if not isinstance(row, dict):
            raise ValueError(f"line {number}: not a JSON object")
        question, answer = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not isinstance(answer, str):
            raise ValueError(f"line {number}: needs 'question' and 'answer' strings")
        ref = extract(answer.split("####")[-1]) if "####" in answer else None
        if ref is None:
            raise ValueError(f"line {number}: the answer does not end in '#### N'")
        problems.append(Problem(question, ref))
    if not problems:
        raise ValueError("holds no problems")
    return problems[:limit] if limit else problems


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def default_tolerance(p: float, n: int, z: float = Z95) -> float:
    """How far two accuracies on the same n problems may differ by chance (two-sided, ~95%)."""
    if n == 0:
        return 1.0
    p = min(max(p, 1 / n), 1 - 1 / n)  # no zero-width band at 0% or 100%
    return z * math.sqrt(2 * p * (1 - p) / n)


def detectable_drop(p: float, n: int) -> float:
    """The smallest drop from accuracy p that two runs over the same n problems detect,
    one-sided alpha 0.05 with power 0.8 (normal approximation): (z_a + z_b) * sqrt(2p(1-p)/n).

    92% on 64 problems: 12 points, so a 92% to 87% regression passes unseen; on 1,319: 2.6.
    """
    if n == 0:
        return 1.0
    p = min(max(p, 1 / n), 1 - 1 / n)  # no zero-width band at 0% or 100%
    return min(1.0, (Z_ALPHA_05_ONE_SIDED + Z_POWER_80) * math.sqrt(2 * p * (1 - p) / n))
