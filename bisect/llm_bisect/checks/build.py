"""The checks a config asks for: each made by the kind its `type` names (kinds.CHECKS)."""

from __future__ import annotations

from pathlib import Path

from ..config import CheckConfig
from ..kinds import CHECKS, CheckContext
from . import Check


def build_checks(configs: list[CheckConfig], base_dir: Path) -> list[Check]:
    """The checks a config asks for, in its order; files relative to `base_dir`."""
    return [
        CHECKS[cfg.type].make(cfg, CheckContext(f"checks.{i}", base_dir))
        for i, cfg in enumerate(configs)
    ]
