"""The logprobs check: token ids and top-k logprobs against the golden."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import EndpointError
from ..model import CheckResult
from . import PROMPTS_AT_ONCE, ChatEndpoint, map_concurrent
from .compare import Step, diverge, teacher_deltas
from .metrics import excerpt

FLOOR_MAX_DELTA = 0.1
"""Least |Δlogprob| allowed on agreeing positions, whatever calibration saw (bf16 noise)."""
FLOOR_TEACHER_MEAN = 0.05
"""Least mean |Δlogprob| allowed on the teacher-forced golden continuation."""
NOISE_FACTOR = 3.0
"""Thresholds are this many times the noise calibration observed, above the floors."""


def _steps(rows: Sequence[Sequence[Any]]) -> list[Step]:
    return [Step(str(t), float(lp), dict(top)) for t, lp, top in rows]


class LogprobsCheck:
    """Bad when greedy tokens part from the golden's in a way kernel noise cannot explain."""

    name = "logprobs"

    def __init__(
        self,
        prompts: list[str],
        *,
        max_tokens: int = 32,
        top_k: int = 5,
        max_abs_delta: float | None = None,
        teacher_mean_abs_delta: float | None = None,
    ) -> None:
        self.prompts = prompts
        self.max_tokens = max_tokens
        self.top_k = top_k
        self._configured = {
            "max_abs_delta": max_abs_delta,
            "teacher_mean_abs_delta": teacher_mean_abs_delta,
        }
        self._golden: list[dict[str, Any]] | None = None
        self._limits: dict[str, Any] = {}

    def _ask(self, endpoint: ChatEndpoint, prompt: str) -> Any:
        return endpoint.chat(
            prompt,
            max_tokens=self.max_tokens,
            logprobs=True,
            top_logprobs=self.top_k,
            return_token_ids=True,
            return_tokens_as_token_ids=True,
        )

    def _teacher(
        self, endpoint: ChatEndpoint, prompt_ids: Sequence[int], ids: Sequence[int]
    ) -> list[float | None]:
        score = getattr(endpoint, "score", None)
        if score is None or not prompt_ids or not ids:
            return []
        return list(score([*prompt_ids, *ids])[len(prompt_ids) :])

    def _case(self, endpoint: ChatEndpoint, prompt: str) -> dict[str, Any]:
        reply = self._ask(endpoint, prompt)
        if not reply.steps:
            raise EndpointError("the server returned no logprobs (logprobs=true)")
        return {
            "prompt": prompt,
            "content": reply.content,
            "reasoning": reply.reasoning,
            "steps": [[s.token, s.logprob, dict(s.top)] for s in reply.steps],
            "token_ids": list(reply.token_ids),
            "prompt_token_ids": list(reply.prompt_token_ids),
            "teacher": self._teacher(endpoint, reply.prompt_token_ids, reply.token_ids),
        }

    def record(self, endpoint: ChatEndpoint) -> dict[str, Any]:
        cases = map_concurrent(lambda p: self._case(endpoint, p), self.prompts, PROMPTS_AT_ONCE)
        return {"top_k": self.top_k, "max_tokens": self.max_tokens, "cases": cases}

    def use(self, section: Mapping[str, Any], calibration: Mapping[str, Any] | None) -> None:
        self._golden = list(section["cases"])
        self.prompts = [c["prompt"] for c in self._golden]
        noise = calibration or {}
        limits: dict[str, Any] = {}
        for key, floor in (
            ("max_abs_delta", FLOOR_MAX_DELTA),
            ("teacher_mean_abs_delta", FLOOR_TEACHER_MEAN),
        ):
            if self._configured[key] is not None:
                limits[key] = {"value": self._configured[key], "from": "config"}
            elif key in noise:
                value = max(floor, NOISE_FACTOR * float(noise[key]))
                limits[key] = {
                    "value": value,
                    "from": f"calibration ({noise[key]:.4f} x {NOISE_FACTOR:g})",
                }
            else:
                limits[key] = {"value": floor, "from": "default"}
        allowed = int(noise.get("not_close", 0))
        limits["not_close"] = {"value": allowed, "from": "calibration" if noise else "default"}
        self._limits = limits

    def thresholds(self) -> dict[str, Any]:
        return self._limits

    def noise(self, metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "max_abs_delta": max((m["max_abs_delta"] for m in metrics), default=0.0),
            "teacher_mean_abs_delta": max(
                (m["teacher_mean_abs_delta"] for m in metrics), default=0.0
            ),
            "not_close": max((m["not_close"] for m in metrics), default=0),
            "min_agreement": min((m["agreement"] for m in metrics), default=1.0),
        }

    def run(self, endpoint: ChatEndpoint) -> CheckResult:
        if self._golden is None:
            raise ValueError("the logprobs check needs a golden")
        cases, problems = [], []
        worst_teacher, worst_delta, not_close, agree = 0.0, 0.0, 0, []

        def ask(g: Mapping[str, Any]) -> tuple[Any, list[float | None]]:
            reply = self._ask(endpoint, g["prompt"])
            return reply, self._teacher(endpoint, g["prompt_token_ids"], g["token_ids"])

        answers = map_concurrent(ask, self._golden, PROMPTS_AT_ONCE)
        for g, (reply, teacher) in zip(self._golden, answers, strict=True):
            d = diverge(_steps(g["steps"]), list(reply.steps))
            deltas = teacher_deltas(g["teacher"], teacher)
            teacher_mean = sum(deltas) / len(deltas) if deltas else 0.0
            worst_teacher, worst_delta = (
                max(worst_teacher, teacher_mean),
                max(worst_delta, d.max_abs_delta),
            )
            not_close += not d.close
            agree.append(d.agreement)
            cases.append(
                {
                    "prompt": g["prompt"],
                    "first_divergence": d.first,
                    "close": d.close,
                    "agreement": d.agreement,
                    "max_abs_delta": d.max_abs_delta,
                    "mean_abs_delta": d.mean_abs_delta,
                    "teacher_mean_abs_delta": teacher_mean,
                    "golden": g["content"],
                    "content": reply.content,
                }
            )
            if not d.close:
                problems.append(
                    f"{g['prompt']!r}: tokens part at position {d.first} and neither is in the "
                    f"other's top-{self.top_k} — golden: {excerpt(g['content'], 60)} / "
                    f"now: {excerpt(reply.content, 60)}"
                )
        metrics = {
            "max_abs_delta": worst_delta,
            "teacher_mean_abs_delta": worst_teacher,
            "not_close": not_close,
            "agreement": min(agree, default=1.0),
        }
        limits = {k: v["value"] for k, v in self._limits.items()}
        failed = []
        if not_close > limits.get("not_close", 0):
            failed.append(f"{not_close} of {len(cases)} prompts not close")
        if worst_teacher > limits.get("teacher_mean_abs_delta", FLOOR_TEACHER_MEAN):
            failed.append(
                f"teacher-forced mean |Δlogprob| {worst_teacher:.3f} > "
                f"{limits['teacher_mean_abs_delta']:.3f}"
            )
        if worst_delta > limits.get("max_abs_delta", FLOOR_MAX_DELTA):
            limit = limits["max_abs_delta"]
            failed.append(f"max |Δlogprob| {worst_delta:.3f} > {limit:.3f} on agreeing tokens")
        if not failed:
            evidence = (
                f"{len(cases)} prompts match the golden (max |Δ| {worst_delta:.3f}, "
                f"teacher-forced mean |Δ| {worst_teacher:.3f})"
            )
        else:
            evidence = "; ".join(failed) + (f" — {problems[0]}" if problems else "")
        return CheckResult(
            name=self.name,
            passed=not failed,
            score=sum(agree) / len(agree) if agree else 1.0,
            evidence=evidence,
            details={"cases": cases, "metrics": metrics, "thresholds": self._limits},
        )
