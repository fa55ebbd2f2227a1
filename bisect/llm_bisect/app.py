"""Wiring: config in, seams built, runner called. The CLI's commands call these.

This is where the caller's environment, the clock and real I/O are chosen;
everything below takes them as arguments.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .checks import Check, build_checks
from .client import OpenAIClient
from .config import Config, config_digest, expand_env, load_config
from .errors import ConfigError
from .launchers import Launcher, Server
from .launchers.process import ProcessLauncher
from .model import Candidate, ProbeOutcome
from .runner import Progress, RunResult, build_plan, probe, run
from .search import Mode, Plan
from .sources.git import GitSource


@dataclass(frozen=True)
class Setup:
    """A validated config with everything resolved; nothing started yet."""

    config: Config
    base_dir: Path
    source: GitSource
    launcher: Launcher
    checks: list[Check]
    secrets: list[str]

    def client(self, server: Server) -> OpenAIClient:
        return OpenAIClient(
            server.base_url,
            model=self.config.server.model,
            timeout=self.config.server.request_timeout,
        )


def setup(
    config_path: Path,
    environ: Mapping[str, str],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Setup:
    """Load and validate a config, open its repository, build launcher and checks."""
    config = load_config(config_path)
    base_dir = config_path.resolve().parent
    source = GitSource(base_dir / config.candidates.repo)
    env = expand_env(config.server.env, environ)
    cwd = base_dir / config.server.cwd if config.server.cwd else base_dir
    if not cwd.is_dir():
        raise ConfigError(f"server.cwd: not a folder '{config.server.cwd}'")
    launcher = ProcessLauncher(
        config.server.command,
        env=env,
        secrets=list(env.values()),
        cwd=cwd,
        ready_timeout=config.server.ready_timeout,
        base_env=environ,
        clock=clock,
        sleep=sleep,
    )
    return Setup(
        config, base_dir, source, launcher, build_checks(config.checks), list(env.values())
    )


def with_ends(config: Config, good: str | None, bad: str | None) -> Config:
    """The config with --good / --bad applied."""
    if good is None and bad is None:
        return config
    ends = config.candidates.model_copy(
        update={k: v for k, v in (("good", good), ("bad", bad)) if v is not None}
    )
    return config.model_copy(update={"candidates": ends})


def plan_of(s: Setup, good: str | None, bad: str | None, find_fix: bool) -> tuple[Config, Plan]:
    config = with_ends(s.config, good, bad)
    mode = Mode.FIX if find_fix else Mode.REGRESSION
    return config, build_plan(s.source, config.candidates.good, config.candidates.bad, mode)


def run_bisect(
    s: Setup,
    out_dir: Path,
    *,
    good: str | None = None,
    bad: str | None = None,
    find_fix: bool = False,
    progress: Progress | None = None,
) -> RunResult:
    config, plan = plan_of(s, good, bad, find_fix)
    digest = config_digest(config) + (":fix" if find_fix else "")
    return run(
        plan,
        digest=digest,
        out_dir=out_dir,
        launcher=s.launcher,
        checks=s.checks,
        client=s.client,
        repeats=config.probe.repeats,
        progress=progress,
    )


def check_one(
    s: Setup, ref: str, out_dir: Path, progress: Progress
) -> tuple[Candidate, ProbeOutcome]:
    """Probe one candidate (the `check` command)."""
    candidate = s.source.resolve(ref, "--candidate")
    outcome = probe(
        candidate,
        launcher=s.launcher,
        checks=s.checks,
        probe_dir=out_dir / "probes" / candidate.short,
        repeats=s.config.probe.repeats,
        client=s.client,
        progress=progress,
    )
    progress.finished(candidate, outcome)
    return candidate, outcome
