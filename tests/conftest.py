"""Shared fixtures."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from helpers import History
from llm_bisect import plugins
from toybuild import index, toy  # noqa: F401  (fixtures of the build tests)

# The kinds load once, explicitly, as the CLI and services.setup load them (plugins.load);
# tests that read a config in this process need them too.
plugins.load()

# Tests never reach the network: Hugging Face datasets come from local files only.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

# A shell without job control starts `pytest &` with SIGINT ignored, and every child would
# inherit that: the Ctrl-C tests' llm-bisect would never see their Ctrl-C. A handler here
# gives each child the default disposition again (exec resets handled signals).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def history(tmp_path: Path) -> Callable[..., History]:
    def make(faults: Mapping[int, str], n: int = 16, **kw: Any) -> History:
        return History(tmp_path, faults, n, **kw)

    return make


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    """The Docker engine; skip without one, but fail under CI, which must start one."""
    try:
        engine = docker.from_env()
        engine.ping()
        return engine
    except docker.errors.DockerException as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must start a Docker engine: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
