"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from helpers import History


@pytest.fixture
def history(tmp_path: Path) -> Callable[..., History]:
    def make(faults: Mapping[int, str], n: int = 16, **kw: Any) -> History:
        return History(tmp_path, faults, n, **kw)

    return make
