"""The `image` build strategy's kind: `build.strategies: [{type: image}]`, the launcher's image
template (Docker launcher only). Its strategy, ImageStrategy, is the builds package's (the
Builder gives each Docker engine its own)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from ..config import StrategyBase
from ..kinds import STRATEGIES, StrategyKind, StrategyRules
from . import ImageStrategy


class ImageStrategyConfig(StrategyBase):
    """Today's behaviour: the launcher's image template (Docker launcher only)."""

    model_config = ConfigDict(**StrategyBase.model_config, title="ImageStrategy")  # as before

    type: Literal["image"]
    """`image`: the launcher's image template names the commit's image."""


def needs_images(cfg: StrategyBase, rules: StrategyRules) -> None:
    """An image build fits only a launcher that runs images."""
    if not rules.images:
        raise ValueError(f"{rules.key}: image builds need launcher: docker")


KIND = STRATEGIES.register(
    StrategyKind(
        "image",
        ImageStrategyConfig,
        make=lambda cfg, ctx: (ImageStrategy(), None),
        validate=needs_images,
    )
)
