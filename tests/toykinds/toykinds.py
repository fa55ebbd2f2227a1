"""A toy launcher and a toy check from another package: importing this module registers them.

`launcher: toyserve` serves each build in this process with llm-bisect's simulated engine
(the fault its commit carries); `type: toysum` asks one sum and is bad when the answer lacks
it. llm-bisect finds both through the `llm_bisect.kinds` entry point, with none of its files
edited.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from pydantic import BaseModel

from llm_bisect.checks import ChatEndpoint
from llm_bisect.checks.golden import Golden
from llm_bisect.config import CheckBase, ServerBase
from llm_bisect.kinds import CHECKS, LAUNCHERS, CheckKind, LauncherContext, LauncherKind
from llm_bisect.launchers import Artifact, Instrument
from llm_bisect.model import Candidate, CheckResult
from llm_bisect.sim.server import Engine, engine_settings, serve


class ToyServeConfig(ServerBase):
    launcher: Literal["toyserve"]
    repo: str
    """The history whose sim-engine.json names each commit's fault."""


class ToyServer:
    def __init__(self, engine: Engine) -> None:
        self.http = serve(engine, 0)
        self.base_url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def __enter__(self) -> ToyServer:
        self.thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def wait_ready(self) -> None:
        return None

    def check_alive(self, wait: float = 0.0) -> None:
        return None

    def log_tail(self, lines: int = 20) -> str:
        return ""

    def fingerprint(self) -> dict[str, Any]:
        return {}

    def stop(self) -> None:
        if self.thread.is_alive():
            self.http.shutdown()
        self.http.server_close()


class ToyServeLauncher:
    def __init__(self, cfg: ToyServeConfig, ctx: LauncherContext) -> None:
        self.repo = ctx.base_dir / cfg.repo

    def artifact(self, candidate: Candidate) -> Artifact:
        return Artifact(ref=candidate.commit, available=True, local=True)

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> ToyServer:
        fault = str(engine_settings(self.repo, candidate.commit).get("fault", ""))
        return ToyServer(Engine(candidate.commit, fault, "reasoning_content"))

    def prefetch(self, candidates: list[Candidate]) -> None:
        return None

    def quiet(self) -> AbstractContextManager[None]:
        return nullcontext()

    def reap(self) -> list[str]:
        return []

    def close(self) -> None:
        return None


class ToySumConfig(CheckBase):
    type: Literal["toysum"]
    a: int = 2
    b: int = 2


class ToySection(BaseModel):
    content: str | None


class ToySum:
    name = "toysum"
    needs_golden = False

    def __init__(self, cfg: ToySumConfig) -> None:
        self.prompt = f"What is {cfg.a}+{cfg.b}? Reply with the number only."
        self.answer = cfg.a + cfg.b

    def record(self, endpoint: ChatEndpoint) -> ToySection:
        return ToySection(content=endpoint.chat(self.prompt, max_tokens=16).content)

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        content = endpoint.chat(self.prompt, max_tokens=16).content or ""
        passed = re.search(rf"\b{self.answer}\b", content) is not None
        return CheckResult("toysum", passed, float(passed), f"answered {content!r}")

    def thresholds(self, golden: Golden | None) -> dict[str, Any]:
        return {}

    def noise(self, results: Sequence[CheckResult]) -> BaseModel | None:
        return None


LAUNCHER = LAUNCHERS.register(
    LauncherKind("toyserve", ToyServeConfig, make=ToyServeLauncher, shape=frozenset(), argv=())
)
CHECK = CHECKS.register(CheckKind("toysum", ToySumConfig, make=lambda cfg, ctx: ToySum(cfg)))
