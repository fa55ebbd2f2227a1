"""The checks a config asks for."""

from __future__ import annotations

from pathlib import Path

from ..config import CanaryConfig, CheckConfig, EvalConfig, ExpectConfig, LogprobsConfig
from ..errors import ConfigError
from . import Check
from .budget import Budget
from .canary import CanaryCheck
from .dataset import load as load_problems
from .eval import EvalCheck
from .expect import ExpectCheck
from .lm_eval import LmEvalConfig
from .lm_eval import build as build_lm_eval
from .logprobs import LogprobsCheck


def build_checks(configs: list[CheckConfig], base_dir: Path) -> list[Check]:
    """The checks a config asks for, in its order; files relative to `base_dir`."""
    checks: list[Check] = []
    for i, cfg in enumerate(configs):
        if isinstance(cfg, LmEvalConfig):
            checks.append(build_lm_eval(cfg, base_dir, f"checks.{i}"))
            continue
        if not isinstance(cfg, CanaryConfig | ExpectConfig | LogprobsConfig | EvalConfig):
            raise ConfigError(f"checks.{i}: a '{cfg.type}' entry is read before checks are made")
        budget = Budget(cfg.max_tokens, cfg.max_tokens_cap, cfg.extra())
        if isinstance(cfg, CanaryConfig):
            checks.append(CanaryCheck(cfg.prompts, budget=budget))
        elif isinstance(cfg, ExpectConfig):
            checks.append(ExpectCheck([(c.prompt, c.match) for c in cfg.cases], budget))
        elif isinstance(cfg, LogprobsConfig):
            checks.append(
                LogprobsCheck(
                    cfg.prompts,
                    max_tokens=cfg.max_tokens,
                    top_k=cfg.top_k,
                    max_abs_delta=cfg.max_abs_delta,
                    teacher_mean_abs_delta=cfg.teacher_mean_abs_delta,
                    topk_max_abs_delta=cfg.topk_max_abs_delta,
                    extra=cfg.extra(),
                )
            )
        elif isinstance(cfg, EvalConfig):
            path = base_dir / cfg.path if cfg.path else None
            try:
                problems = load_problems(
                    path=path,
                    dataset=cfg.dataset,
                    dataset_config=cfg.dataset_config,
                    split=cfg.split,
                    shots=cfg.shots if cfg.format == "vllm" else 0,
                    limit=cfg.limit,
                    key=f"checks.{i}",
                    download=cfg.download,
                )
            except OSError as exc:
                raise ConfigError(
                    f"checks.{i}.path: cannot read '{cfg.path}' ({exc.strerror})"
                ) from None
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"checks.{i}.path: '{cfg.path}' is not UTF-8 text (byte {exc.start})"
                ) from None
            except ValueError as exc:
                raise ConfigError(f"checks.{i}.path: '{cfg.path}' {exc}") from None
            checks.append(
                EvalCheck(
                    problems,
                    prompt_format=cfg.format,
                    concurrency=cfg.concurrency,
                    budget=budget,
                    tolerance=cfg.tolerance,
                    null_share_jump=cfg.null_share_jump,
                    min_accuracy=cfg.min_accuracy,
                )
            )
    return checks
