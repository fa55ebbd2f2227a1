"""Shared fixtures."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from hypothesis import settings

from helpers import History
from llm_bisect import plugins
from localregistry import LocalRegistry, serving
from toybuild import index, toy  # noqa: F401  (fixtures of the build tests)

# Every process a test starts (the simulator, the CLI) runs this checkout's code, not an
# installed llm-bisect's (pytest's `pythonpath` reaches this process only).
_SOURCE = str(Path(__file__).resolve().parents[1] / "bisect")
# Once: an xdist worker inherits the controller's, which this already set (a second copy
# made the server's environment, and so a run's config digest, differ from a printed command's).
_PATHS = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _SOURCE]
os.environ["PYTHONPATH"] = os.pathsep.join([_SOURCE, *_PATHS])

# The kinds load once, explicitly, as the CLI and services.setup load them (plugins.load);
# tests that read a config in this process need them too.
plugins.load()

# No property test depends on how fast the machine is: hypothesis's deadline (200 ms an
# example) failed test_redact's shell-quoting property under load, 283 ms once, 5 ms again.
settings.register_profile("llm-bisect", deadline=None)
settings.load_profile("llm-bisect")

# Tests never reach the network: Hugging Face datasets come from local files only.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

# A shell without job control starts `pytest &` with SIGINT ignored, and every child would
# inherit that: the Ctrl-C tests' llm-bisect would never see their Ctrl-C. A handler here
# gives each child the default disposition again (exec resets handled signals).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The user's cache folder of every llm-bisect the tests start (the engine cache is on by
    default, under $XDG_CACHE_HOME): a temporary one, never the home of whoever runs them."""
    path = tmp_path_factory.mktemp("user-cache")
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(path)
    yield path
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


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


@pytest.fixture(scope="session")
def registries(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalRegistry, LocalRegistry]]:
    """Two real registries (Debian's docker-registry) on loopback, each with its own storage:
    an upstream and a mirror. Skip without the package, but fail under CI, which installs it."""
    if shutil.which("docker-registry") is None:
        why = "docker-registry (Debian's distribution 2.8) is not installed"
        if os.environ.get("CI"):
            pytest.fail(f"CI must install it: {why}")
        pytest.skip(f"{why}: apt-get install docker-registry")
    root = tmp_path_factory.mktemp("registries")
    with ExitStack() as stack:
        upstream = stack.enter_context(serving(root / "upstream"))
        mirror = stack.enter_context(serving(root / "mirror"))
        yield upstream, mirror


SHARED_MARKERS = frozenset({"docker", "slurm", "vllm"})
"""Tests of a daemon there is one of on the machine: the Docker engine, the Slurm cluster."""

SHARED_FIXTURES = frozenset({"client", "registries"})
"""The Docker engine; the session's registries, which the engine pulls from and pushes to."""

SHARED_MODULES = frozenset(
    {"test_launchers_kubernetes", "test_launchers_slurm", "test_report_html"}
)
"""Modules whose tests reach a shared daemon or scan global state, marked or not: the
Kubernetes stand-in runs containers and lists every image; Slurm's queue; Chromium."""


@dataclass(frozen=True)
class Shape:
    """What the split over xdist workers reads of a test."""

    nodeid: str
    module: str
    """The file's name without .py."""
    markers: frozenset[str]
    fixtures: frozenset[str]
    module_fixture: bool
    """Whether it uses a fixture made once a module (a run, a venv, a toy index)."""

    @property
    def shares_a_daemon(self) -> bool:
        """Whether it uses a daemon or state that other tests see."""
        return bool(
            self.markers & SHARED_MARKERS
            or self.fixtures & SHARED_FIXTURES
            or self.module in SHARED_MODULES
        )


def shape_of(item: pytest.Item) -> Shape:
    info = getattr(item, "_fixtureinfo", None)
    chains = info.name2fixturedefs.values() if info is not None else ()
    return Shape(
        item.nodeid,
        item.path.stem,
        frozenset(mark.name for mark in item.iter_markers()),
        frozenset(getattr(item, "fixturenames", ())),
        any(chain and chain[-1].scope in ("module", "package", "class") for chain in chains),
    )


def xdist_groups(tests: list[Shape]) -> dict[str, str]:
    """The xdist group of each test that has one, by node id, under `--dist loadgroup`
    (scripts/test: `-n 2`): a group's tests run on one worker, one after another, the
    others spread over the workers. The tests that reach a daemon are one group; a module's
    fixture is made once, in its module's group, or in the daemons' where the module
    reaches one."""
    daemons = {test.module for test in tests if test.shares_a_daemon}
    groups: dict[str, str] = {}
    for test in tests:
        if test.shares_a_daemon:
            groups[test.nodeid] = "daemons"
        elif test.module_fixture:
            groups[test.nodeid] = "daemons" if test.module in daemons else test.module
    return groups


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which adds the group to each node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = xdist_groups([shape_of(item) for item in items])
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))


VLLM_STARTS: dict[str, int] = {}
"""Real vLLM starts by test (marker `vllm`): the vLLM half's cost, printed at its end."""


_RUNNING: list[str] = [""]
"""The test being set up, run or torn down: a shared (module-scoped) fixture's starts count
against the first test that asks for it."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _RUNNING[0] = item.nodeid


@pytest.fixture(autouse=True, scope="session")
def _count_vllm_starts() -> Iterator[None]:
    """Count each vLLM server started (a port move's restart included), by test."""
    from llm_bisect.launchers.process import ProcessServer

    spawn = ProcessServer._spawn

    def counted(server: ProcessServer) -> None:
        if any("vllm.entrypoints" in arg for arg in server.argv):
            VLLM_STARTS[_RUNNING[0]] = VLLM_STARTS.get(_RUNNING[0], 0) + 1
        spawn(server)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ProcessServer, "_spawn", counted)
        yield


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not VLLM_STARTS:
        return
    total = sum(VLLM_STARTS.values())
    terminalreporter.section(f"real vLLM starts: {total}")
    for name, count in VLLM_STARTS.items():
        terminalreporter.write_line(f"{count:4d}  {name}")
    times = os.environ.get("LLM_BISECT_TIMES")
    if times:  # scripts/test's table of phases (the count where the others have seconds)
        with open(times, "a") as out:
            out.write(f"real vLLM starts (a count) {total}\n")
