"""Command builds: your own build script, once per commit, with a timeout and its log kept.

    run: ["./build.sh", "{commit}", "{out}"]     {out}: the build's folder

A non-zero exit or a timeout is no build: the probe is `skip`, never bad. The
build's interpreter (`{python}`) is `{out}/bin/python` when the script made a
venv there, else the Python llm-bisect runs on. Its builds are keyed by the command,
the folder it runs in and the machine (a build of another command is never reused).
"""

from __future__ import annotations

import hashlib
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from ..config import StrategyBase, check_placeholders
from ..jsonvalue import Json
from ..kinds import STRATEGIES, BuildContext, StrategyKind, StrategyRules
from ..logs import run_logged
from ..model import Candidate
from ..redact import redact
from ..secretnames import argv_secrets
from ..templates import fill
from . import Build, ImageTarget


class CommandStrategy:
    """Run the user's build command."""

    name = "command"
    cache_name = "command"

    def __init__(
        self,
        run: Sequence[str],
        *,
        cwd: Path,
        timeout: float,
        env: Mapping[str, str],
        secret_names: Sequence[str] = (),
    ) -> None:
        self.secret_names = list(secret_names)
        self.secrets = argv_secrets(run)
        """What its command line carries (`--api-key X`, a URL login): masked in its log
        and its facts."""
        self.run = list(run)
        self.cwd = cwd
        self.timeout = timeout
        self.env = dict(env)

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        return True, redact(" ".join(self.run), self.secrets)

    def identity(self, candidate: Candidate) -> dict[str, Json]:
        """What makes its build (written in BUILD.json): a secret of the command line by its
        hash only, so another key is another build and no key is on disk."""
        run: list[Json] = [redact(a, self.secrets) for a in self.run]
        found: dict[str, Json] = {"run": run, "cwd": str(self.cwd), "machine": platform.machine()}
        if self.secrets:
            joined = "\0".join(sorted(self.secrets)).encode()
            found["secrets"] = hashlib.sha256(joined).hexdigest()[:16]
        return found

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Json]:
        values = {"commit": candidate.commit, "short": candidate.short, "out": str(out)}
        argv = [fill(a, values) for a in self.run]
        run_logged(
            argv,
            log,
            env=self.env,
            cwd=self.cwd,
            timeout=self.timeout,
            what="build command",
            redact=self.secret_names,
            secrets=self.secrets,
        )
        return {"command": [redact(a, self.secrets) for a in argv]}

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        venv = folder / "bin" / "python"
        python = str(venv) if venv.exists() else sys.executable
        return Build("command", folder, python, {}, dict(facts))


# ---- the `type: command` strategy kind -------------------------------------------------------


class CommandStrategyConfig(StrategyBase):
    """Your own build: `run` once per commit; `{out}` is the build's folder."""

    model_config = ConfigDict(**StrategyBase.model_config, title="CommandStrategy")  # as before

    type: Literal["command"]
    """`command`: your own build command."""
    run: list[str] = Field(min_length=1)
    """argv template: `{commit}`, `{short}`, `{out}`; never run through a shell."""
    timeout: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    """Seconds a build may take; past them the candidate is skip."""

    @field_validator("run")
    @classmethod
    def _placeholders(cls, run: list[str]) -> list[str]:
        check_placeholders(run, "run", frozenset({"commit", "short", "out"}))
        return run


def from_config(
    cfg: CommandStrategyConfig, ctx: BuildContext
) -> tuple[CommandStrategy, ImageTarget | None]:
    """The user's build command, run in the config's folder."""
    strategy = CommandStrategy(
        cfg.run, cwd=ctx.base_dir, timeout=cfg.timeout, env=ctx.environ,
        secret_names=ctx.secret_names,
    )  # fmt: skip
    return strategy, None


def _secrets(cfg: CommandStrategyConfig, environ: Mapping[str, str], i: int) -> list[str]:
    return argv_secrets(cfg.run)


def _validate(cfg: CommandStrategyConfig, rules: StrategyRules) -> None:
    if rules.images:
        raise ValueError(f"{rules.key}: command builds run with launcher: process")


KIND = STRATEGIES.register(
    StrategyKind(
        "command", CommandStrategyConfig, make=from_config, validate=_validate, secrets=_secrets
    )
)
