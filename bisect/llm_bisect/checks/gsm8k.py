"""GSM8K problems, prompts and scoring, as the common harnesses do them.

Two prompt formats:
  instruct  the question and "Solve it step by step, then end with 'The answer is N.'";
            extraction: `#### N`, else `The answer is N`, else the last number
  vllm      vLLM's own (tests/evals/gsm8k/gsm8k_eval.py): k worked examples from the
            train split as "Question: ...\nAnswer:{gen_prefix} ...\n\n", then
            "Question: ...\nAnswer:{gen_prefix}"; extraction: the last integer (the
            stop strings vLLM's runner sends are the vllm-eval file's to set)

Problems come from the bundled set (offline), a local JSONL or parquet file, or
a Hugging Face dataset (`openai/gsm8k`, via the `datasets` library and its cache).
Accuracy comes with a Wilson 95% interval, so 50 problems are not read as more
certain than they are. Everything but `load_dataset` is pure.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..files import read_capped

MAX_EVAL_BYTES = 256 * 2**20
"""The most bytes read of an eval file (GSM8K's whole test split is under 1 MB)."""

_NUMBER = r"-?[\d,]*\.?\d+"
_HASHES = re.compile(rf"####\s*\$?({_NUMBER})")
_THE_ANSWER = re.compile(rf"[Tt]he (?:final )?answer is:?\s*\$?\\?(?:boxed\{{)?({_NUMBER})")
_ANY = re.compile(_NUMBER)
_INT = re.compile(r"\d+")
INSTRUCTION = "\nSolve it step by step, then end with 'The answer is N.'"

Z95 = 1.959964
DETECTABLE_WARN = 0.05
"""Warn when an eval cannot see an accuracy drop this large (5 points)."""


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str
    """The reference number, as text."""
    solution: str = ""
    """The worked answer, ending in `#### N` (shown in few-shot examples)."""


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


def last_integer(text: str | None) -> str | None:
    """vLLM's GSM8K extraction: the last run of digits, commas removed."""
    found = _INT.findall((text or "").replace(",", ""))
    return str(int(found[-1])) if found else None


def problem_of(row: Any, where: str) -> Problem:
    """One GSM8K row (`question`, `answer` ending in `#### N`); ValueError naming `where`."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: not a JSON object")
    question, answer = row.get("question"), row.get("answer")
    if not isinstance(question, str) or not isinstance(answer, str):
        raise ValueError(f"{where}: needs 'question' and 'answer' strings")
    ref = extract(answer.split("####")[-1]) if "####" in answer else None
    if ref is None:
        raise ValueError(f"{where}: the answer does not end in '#### N'")
    return Problem(question, ref, answer)


def load_problems(path: Path | None = None, limit: int | None = None) -> list[Problem]:
    """A GSM8K-format JSONL (`question`, `answer` ending in `#### N`); default: the bundled set."""
    if path is None:
        text = resources.files("llm_bisect.data").joinpath("gsm8k_mini.jsonl").read_text()
    else:
        text = read_capped(path, MAX_EVAL_BYTES).decode("utf-8")
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            raise ValueError(f"line {number}: not a JSON object") from None
        problems.append(problem_of(row, f"line {number}"))
    if not problems:
        raise ValueError("holds no problems")
    return problems[:limit] if limit else problems


def vllm_prompt(question: str, shots: Sequence[Problem], gen_prefix: str = "") -> str:
    """vLLM's few-shot GSM8K prompt (tests/evals/gsm8k/gsm8k_eval.py, `_build_gsm8k_prompts`:
    `gen_prefix` after each "Answer:", e.g. an empty think block)."""
    examples = "".join(
        f"Question: {s.question}\nAnswer:{gen_prefix} {s.solution}\n\n" for s in shots
    )
    return f"{examples}Question: {question}\nAnswer:{gen_prefix}"


def instruct_prompt(question: str) -> str:
    return question + INSTRUCTION


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
