"""kinds.py: a launcher and a check are each one module.

The toy launcher and the toy check below live in this test file alone: registered here, they
are accepted by the config (`launcher: toy`, `type: toy`), listed in its errors and schema,
and a bisection through the CLI's `run` uses them to find the culprit.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from helpers import History, write_config
from llm_bisect.checks import ChatEndpoint, cheapest_first
from llm_bisect.checks.golden import Golden
from llm_bisect.cli import cli
from llm_bisect.config import (
    CheckBase,
    Config,
    ServerBase,
    check_digest,
    config_digest,
    differing,
    parse_config,
    server_digest,
    setting_digests,
)
from llm_bisect.errors import ConfigError, UnknownKind
from llm_bisect.kinds import (
    CHECKS,
    LAUNCHERS,
    CheckKind,
    LauncherContext,
    LauncherKind,
    Leftovers,
    cost_of,
)
from llm_bisect.launchers import Artifact, Instrument
from llm_bisect.model import Candidate, CheckResult
from llm_bisect.services.reap import reap_servers
from llm_bisect.services.setup import cache_mounted, fast_section, setup, with_engine_cache
from llm_bisect.sim.server import Engine, engine_settings, serve

# ---- a toy launcher: the simulator's engine served in this process ---------------------------


class ToyServerConfig(ServerBase):
    """Each build served in-process by the simulator, with the fault its commit carries."""

    launcher: Literal["toy"]
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
        return None  # it answers once entered

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


class ToyLauncher:
    started: ClassVar[list[str]] = []
    """Every commit a toy launcher served, in order (what the test asserts on)."""

    def __init__(self, cfg: ToyServerConfig, ctx: LauncherContext) -> None:
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
        ToyLauncher.started.append(candidate.commit)
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


TOY_LAUNCHER = LauncherKind(
    "toy", ToyServerConfig, make=ToyLauncher, shape=frozenset({"repo"}), argv=()
)


# ---- a toy check: one sum, answered with a number ------------------------------------------


class ToyCheckConfig(CheckBase):
    type: Literal["toy"]
    a: int = 2
    b: int = 2


class ToySection(BaseModel):
    model_config = ConfigDict(frozen=True)
    content: str | None


class ToyCheck:
    name = "toy"
    needs_golden = False

    def __init__(self, cfg: ToyCheckConfig) -> None:
        self.prompt = f"What is {cfg.a}+{cfg.b}? Reply with the number only."
        self.answer = cfg.a + cfg.b

    def record(self, endpoint: ChatEndpoint) -> ToySection:
        return ToySection(content=endpoint.chat(self.prompt, max_tokens=16).content)

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        content = endpoint.chat(self.prompt, max_tokens=16).content or ""
        passed = re.search(rf"\b{self.answer}\b", content) is not None
        return CheckResult("toy", passed, float(passed), f"answered {content!r}")

    def thresholds(self, golden: Golden | None) -> dict[str, Any]:
        return {}

    def noise(self, results: Sequence[CheckResult]) -> BaseModel | None:
        return None


TOY_CHECK = CheckKind("toy", ToyCheckConfig, make=lambda cfg, ctx: ToyCheck(cfg))


@pytest.fixture
def toys() -> Iterator[None]:
    """The toy launcher and check registered for one test (and gone after it)."""
    ToyLauncher.started = []
    with LAUNCHERS.registered(TOY_LAUNCHER), CHECKS.registered(TOY_CHECK):
        yield


def toy_config(history: History, **over: Any) -> dict[str, Any]:
    return {
        "candidates": {"repo": str(history.repo), "good": history.shas[0], "bad": history.shas[-1]},
        "server": {"launcher": "toy", "repo": str(history.repo), "model": "sim/tiny-chat"},
        "checks": [{"type": "toy"}],
        "localize": False,
        **over,
    }


def test_a_toy_launcher_and_check_registered_from_the_tests_bisect_to_the_culprit(
    tmp_path: Path, toys: None
) -> None:
    history = History(tmp_path, {5: "garbled-math"}, n=8)
    config = write_config(tmp_path / "toy.yaml", toy_config(history))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    found = json.loads((out / "result.json").read_text())
    assert found["status"] == "found"
    assert found["culprit"]["commit"] == history.shas[5]
    assert history.shas[5] in ToyLauncher.started  # the toy launcher served the probes
    checks = {c["name"] for p in found["probes"] for c in p["checks"]}
    assert checks == {"toy"}


def test_candidates_lists_the_range_of_a_launcher_with_no_argument_list(
    tmp_path: Path, toys: None
) -> None:
    """A launcher that declares no argv (`argv=()`) has no command line to show: `candidates`
    names the launcher instead (it crashed: `'ToyServerConfig' object has no attribute
    'args'`)."""
    history = History(tmp_path, {5: "garbled-math"}, n=8)
    config = write_config(tmp_path / "toy.yaml", toy_config(history))
    result = CliRunner().invoke(cli, ["candidates", str(config)])
    assert result.exit_code == 0, result.output
    assert "server: toy (ready within 600s)" in result.output
    assert "Traceback" not in result.output


def test_a_kind_lacking_a_fact_is_refused_when_it_registers() -> None:
    """Required facts are arguments (a launcher's argv and shape); the facts that name fields
    must name its model's: a typo fails now, in one line naming the fact."""
    with pytest.raises(TypeError, match="required keyword-only arguments: 'shape' and 'argv'"):
        LauncherKind("bare", ToyServerConfig, make=ToyLauncher)  # type: ignore[call-arg]
    wrong = LauncherKind("toy", ToyServerConfig, make=ToyLauncher, shape=frozenset(), argv=("cmd",))
    with pytest.raises(
        ValueError,
        match=r"^launcher 'toy': argv names 'cmd', which is no field of ToyServerConfig$",
    ):
        LAUNCHERS.register(wrong)
    untagged = LauncherKind("toy2", ToyServerConfig, make=ToyLauncher, shape=frozenset(), argv=())
    with pytest.raises(ValueError, match=r"needs the field `launcher: Literal\['toy2'\]`$"):
        LAUNCHERS.register(untagged)
    costly = CheckKind("toy", ToyCheckConfig, make=ToyCheck, neutral=frozenset({"patience"}))
    with pytest.raises(ValueError, match="neutral names 'patience'"):
        CHECKS.register(costly)
    assert "toy" not in LAUNCHERS and "toy2" not in LAUNCHERS and "toy" not in CHECKS


def test_a_registered_kind_is_in_the_config_its_errors_and_its_schema(toys: None) -> None:
    base = {"candidates": {"repo": ".", "good": "a", "bad": "b"}}
    cfg = parse_config(
        {**base, "server": {"launcher": "toy", "repo": "."}, "checks": [{"type": "toy", "a": 3}]}
    )
    assert isinstance(cfg.server, ToyServerConfig)
    assert cfg.checks == [ToyCheckConfig(type="toy", a=3)]
    with pytest.raises(ConfigError, match=r"^server\.repo: required key is missing$"):
        parse_config({**base, "server": {"launcher": "toy"}})
    with pytest.raises(ConfigError, match=r"known: process, docker, slurm, kubernetes, toy\)$"):
        parse_config({**base, "server": {"launcher": "k8s"}})
    with pytest.raises(
        ConfigError, match=r"known: canary, expect, logprobs, eval, lm_eval, vllm-eval, toy\)$"
    ):
        parse_config({**base, "server": {"command": ["x"]}, "checks": [{"type": "nope"}]})
    schema = json.dumps(Config.model_json_schema())
    assert "ToyServerConfig" in schema and "ToyCheckConfig" in schema


def test_a_kind_that_left_is_unknown_again(toys: None) -> None:
    LAUNCHERS.unregister("toy")
    try:
        with pytest.raises(ConfigError, match="unknown launcher 'toy'"):
            parse_config({"candidates": {"repo": ".", "good": "a", "bad": "b"},
                          "server": {"launcher": "toy", "repo": "."}})  # fmt: skip
        with pytest.raises(
            UnknownKind, match=r"no launcher 'toy' \(known: process, docker, slurm, kubernetes\)"
        ):
            LAUNCHERS["toy"]
        assert "ToyServerConfig" not in json.dumps(Config.model_json_schema())
    finally:
        LAUNCHERS.register(TOY_LAUNCHER)


def test_a_tag_is_registered_once() -> None:
    with pytest.raises(ValueError, match="launcher 'docker' is registered already"):
        LAUNCHERS.register(
            LauncherKind("docker", ToyServerConfig, make=ToyLauncher, shape=frozenset(), argv=())
        )


# ---- a kind declares its facts: nothing else is edited -------------------------------------


class FactsServerConfig(ToyServerConfig):
    """A toy launcher with fields of every sort the other modules ask a launcher about."""

    launcher: Literal["facts"]  # type: ignore[assignment]
    flavour: str = "plain"
    """Shapes what the server answers: in the golden's identity and the digest."""
    zone: str = "a"
    """Where it runs: in neither."""
    launch_argv: list[str] = Field(default_factory=list)
    """An argument list of its own: secrets masked, fast args added."""
    mounts: list[str] = Field(default_factory=list)
    """Where the engine cache is mounted."""


def _reap_facts(environ: Mapping[str, str]) -> Leftovers | None:
    return Leftovers("the facts cluster", [f"server of {environ.get('FACTS_OWNER', '?')}"])


FACTS_LAUNCHER = LauncherKind(
    "facts",
    FactsServerConfig,
    make=ToyLauncher,
    shape=frozenset({"flavour"}),
    placement=frozenset({"zone"}),
    argv=("launch_argv",),
    cache_mount=lambda cfg, root: cfg.model_copy(update={"mounts": [*cfg.mounts, str(root)]}),
    reap=_reap_facts,
    shown_argv="launch_argv",
)


class CostlyConfig(ToyCheckConfig):
    type: Literal["costly"]  # type: ignore[assignment]
    patience: int = 1
    """How long it waits: never what the golden records."""


class Costly(ToyCheck):
    name = "costly"


FACTS_CHECK = CheckKind(
    "costly",
    CostlyConfig,
    make=lambda cfg, ctx: Costly(cfg),
    cost=-1,
    neutral=frozenset({"patience"}),
)


def test_a_kind_s_declared_facts_reach_every_module_that_asks(tmp_path: Path, history: Any) -> None:
    """A launcher and a check registered here, with their facts on their registration: the
    golden's identity, the digest, secret masking, the fast setup's flags, the engine cache's
    mount, `reap` and the suite's order all see them, with no module of the package edited."""
    h: History = history({}, n=2)
    server = {
        "launcher": "facts",
        "repo": str(h.repo),
        "launch_argv": ["serve", "--api-key", "s3cret-value"],
    }
    base = {
        "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1]},
        "server": server,
        "checks": [{"type": "canary"}, {"type": "costly"}],
    }
    with LAUNCHERS.registered(FACTS_LAUNCHER), CHECKS.registered(FACTS_CHECK):
        plain = parse_config(base)
        flavoured = parse_config({**base, "server": {**server, "flavour": "spicy"}})
        zoned = parse_config({**base, "server": {**server, "zone": "b"}})
        # the golden's identity: a golden of another flavour is another setup's
        assert server_digest(flavoured.server) != server_digest(plain.server)
        assert server_digest(zoned.server) == server_digest(plain.server)
        # the digest: a run resumes in another zone, not with another flavour
        assert config_digest(zoned) == config_digest(plain)
        assert differing(setting_digests(plain), setting_digests(flavoured)) == ["server.flavour"]
        patient = parse_config({**base, "checks": [{"type": "costly", "patience": 9}]})
        impatient = parse_config({**base, "checks": [{"type": "costly"}]})
        assert check_digest(patient.checks[0]) == check_digest(impatient.checks[0])
        # secret masking: a flag named like a secret in its own argument list
        config = write_config(tmp_path / "facts.yaml", base)
        s = setup(config, {"PATH": os.environ["PATH"]})
        assert "s3cret-value" not in s.scrub.text("--api-key s3cret-value")
        # the fast setup's flags go after its own argument list
        fast = fast_section(server, ["--max-model-len", "256"], {})
        assert fast["launch_argv"] == [*server["launch_argv"], "--max-model-len", "256"]
        # the engine cache is mounted its way
        cached = parse_config({**base, "probe": {"engine_cache": {"dir": str(tmp_path / "c")}}})
        made = with_engine_cache(cached, {}, tmp_path)
        assert made is not None and made.root == tmp_path / "c"
        assert cache_mounted(cached.server, made.root).mounts == [str(tmp_path / "c")]
        # reap without a config asks it where its leftovers are
        done = reap_servers(None, {"PATH": "/nowhere", "FACTS_OWNER": "run-7"})
        assert "the facts cluster" in done.looked and "server of run-7" in done.removed
        # the suite runs it first: it declares itself the cheapest
        assert [c.name for c in cheapest_first(s.checks, cost_of)] == ["costly", "canary"]
        # `candidates` prints its own argument list as the server's command line
        code = CliRunner().invoke(cli, ["candidates", str(config)])
        assert code.exit_code == 0, code.output
        assert "server: serve --api-key" in code.output and "s3cret-value" not in code.output
