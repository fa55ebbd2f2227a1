"""Priors from what the model runs (`search.priors`): the good end's server reports the engine
files it executes (the path hook, loads.py), the golden keeps them, and a candidate that
touches only files the model never loads starts the search at a low weight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import sim_command, write_config
from llm_bisect import loads
from llm_bisect.checks.golden import Loads
from llm_bisect.cli import cli
from llm_bisect.model import Candidate
from llm_bisect.posterior import Policy
from llm_bisect.priors import LOW, share, weigh
from llm_bisect.search import Answer, Mode, Plan, plan_batch
from llm_bisect.services.priors import weigh_candidates
from llm_bisect.sources.git import GitSource
from priors_replay import replay, replay_plan

LOADED = [
    "vllm/__init__.py",
    "vllm/entrypoints/openai/api_server.py",
    "vllm/model_executor/__init__.py",
    "vllm/model_executor/models/__init__.py",
    "vllm/model_executor/models/llama.py",
    "vllm/attention/backends/cpu.py",
]
TREE = [*LOADED, "vllm/model_executor/models/glm5.py", "vllm/attention/backends/rocm.py"]
ROOTS = ["vllm", "docs", "tests", "csrc", "README.md"]


def test_weigh_low_only_where_every_touched_file_is_never_loaded_docs_or_tests() -> None:
    """Another model's file, another platform's backend, docs and tests weigh low, and say
    which file; a loaded file, compiled code, a pin, a file absent at the record's commit or
    one the record cannot judge weigh full. Never zero."""
    glm = weigh(["vllm/model_executor/models/glm5.py"], LOADED, TREE, ROOTS)
    assert glm.weight == LOW > 0
    assert glm.why == "low: touches only vllm/model_executor/models/glm5.py, never loaded"
    both = weigh(["vllm/attention/backends/rocm.py", "docs/rocm.md", "tests/test_rocm.py"],
                 LOADED, TREE, ROOTS)  # fmt: skip
    assert both.weight == LOW and "never loaded (and docs and tests)" in both.why
    assert weigh(["docs/a.md", "README.md"], LOADED, TREE, ROOTS).why == "low: touches only docs"
    cases = {
        ("vllm/model_executor/models/glm5.py", "vllm/model_executor/models/llama.py"): "loaded",
        ("vllm/model_executor/models/__init__.py",): "loaded",
        ("csrc/attention/kernel.cu",): "compiled code",
        ("CMakeLists.txt", "docs/a.md"): "compiled code",
        ("setup.py",): "compiled code",
        ("requirements/cuda.txt",): "a dependency pin",
        ("pyproject.toml",): "a dependency pin",
        ("docker/Dockerfile",): "a dependency pin",
        ("vllm/model_executor/models/kimi_k3.py",): "absent at the record's commit",
        ("vllm/model_executor/layers/configs/E=8.json",): "not judged by the record",
        ("benchmarks/run.py",): "not judged by the record",
    }
    for touched, kind in cases.items():
        found = weigh(list(touched), LOADED, [*TREE, "docs/a.md"], ROOTS)
        assert found.weight == 1.0 and found.why.endswith(kind), (touched, found)
    # a package file loaded as a package (its __init__) or as a module: one module
    only = ["vllm/model_executor/models.py"]
    assert weigh(only, LOADED, only, ROOTS).weight == 1.0
    # no record, or a commit that touches nothing: nothing to judge
    assert weigh(["vllm/model_executor/models/glm5.py"], [], TREE, ROOTS).weight == 1.0
    # a record of another code base (the simulator's own modules): it judges nothing here,
    # not even a docs-only commit
    sim = ["llm_bisect/sim/server.py", "yaml/__init__.py"]
    assert weigh(["notes/001.md"], sim, ["notes/001.md"], ["notes", "sim-engine.json"]).weight == 1
    assert weigh([], LOADED, TREE, ROOTS).weight == 1.0


def test_share_is_the_prior_mass_on_a_commit_against_uniform() -> None:
    seq = ["g", "a", "b", "c", "d"]
    assert share({"a": 0.2, "b": 0.2}, seq, "c") == (pytest.approx(1 / 2.4), 0.25)
    assert share({}, seq, "g") == (0.0, 0.0)


def test_the_posterior_search_probes_full_weight_candidates_first() -> None:
    """With the good end and bad end tested, the search's first probe in a range where all but
    one candidate weigh low is that one (uniform: the middle)."""
    shas = [f"{i:040x}" for i in range(1, 14)]
    plan = Plan(Mode.REGRESSION, tuple(Candidate(s) for s in shas))
    seen = {shas[0]: ["good"], shas[-1]: ["bad"]}
    from llm_bisect.model import Verdict

    verdicts = {c: [Verdict(v) for v in vs] for c, vs in seen.items()}
    uniform = plan_batch(plan, verdicts, 1, policy=Policy(flake=0.05))
    weighed = Policy(flake=0.05, prior=tuple((s, LOW) for s in shas[1:] if s != shas[3]))
    first = plan_batch(plan, verdicts, 1, policy=weighed)
    assert not isinstance(uniform, Answer) and not isinstance(first, Answer)
    assert uniform[0].commit != shas[3] and first[0].commit in (shas[3], shas[4])


def test_hook_reports_files_of_every_process_and_changes_nothing(tmp_path: Path) -> None:
    """The hook on PYTHONPATH: a module imported by importlib, a spawned and a forked child
    (which ends with os._exit) are all reported, relative to their package's folder; the
    program's output is the same without it; a folder it cannot write records nothing."""
    pkg = tmp_path / "src" / "eng" / "models"
    pkg.mkdir(parents=True)
    (tmp_path / "src" / "eng" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    for name in ("llama", "glm5", "forked", "spawned"):
        (pkg / f"{name}.py").write_text(f"NAME = {name!r}\n")
    program = (
        "import importlib, multiprocessing as mp, os\n"
        "def fork():\n    import eng.models.forked\n    os._exit(0)\n"
        "if __name__ == '__main__':\n"
        "    print(importlib.import_module('eng.models.llama').NAME)\n"
        "    p = mp.get_context('fork').Process(target=fork); p.start(); p.join()\n"
        "    p = mp.get_context('spawn').Process(target=importlib.import_module,\n"
        "                                        args=('eng.models.spawned',))\n"
        "    p.start(); p.join()\n"
    )
    (tmp_path / "main.py").write_text(program)
    base = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}

    def run(env: dict[str, str]) -> str:
        done = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
        return done.stdout + done.stderr

    plain = run(base)
    probe = tmp_path / "probe"
    hooked = loads.instrument(probe)
    path = os.pathsep.join([*map(str, hooked.paths), base["PYTHONPATH"]])
    env = {**base, **hooked.env, "PYTHONPATH": path}
    assert run(env) == plain == "llama\n"
    found = loads.read(probe)
    assert found is not None
    assert {"eng/__init__.py", "eng/models/__init__.py", "eng/models/llama.py",
            "eng/models/forked.py", "eng/models/spawned.py"} <= set(found)  # fmt: skip
    assert "eng/models/glm5.py" not in found and not any(f.startswith("json/") for f in found)
    # a folder it cannot write (a container's path on the host): nothing, and the same output
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert run({**env, loads.VAR: str(blocked / "loads")}) == plain


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-08-09T09:00:00Z",
           "GIT_COMMITTER_DATE": "2026-08-09T09:00:00Z"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, env=env)  # fmt: skip
    return done.stdout.strip()


MODELS = [
    "glm5",
    "deepseek_v2",
    "qwen3_moe",
    "mixtral",
    "gemma3",
    "phi4",
    "mllama",
    "olmo",
    "jamba",
]
FULL = (3, 7, 11)
"""The Kimi shape: 12 commits after the good end, these three touch what the model loads."""


def kimi_shape(root: Path, culprit: int) -> list[str]:
    """A good end and 12 commits: 9 touch only another model's file, 3 a loaded one; the
    culprit (one of those 3) makes the output null. The good end's server reports LOADED."""
    repo = root / "engine"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "m@example.com")
    _git(repo, "config", "user.name", "M")
    for path in [*LOADED, *(f"vllm/model_executor/models/{m}.py" for m in MODELS)]:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("# v0\n")
    engine = {"loads": LOADED, "fault": "none"}
    (repo / "sim-engine.json").write_text(json.dumps(engine))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "nightly")
    shas = [_git(repo, "rev-parse", "HEAD")]
    others = iter(MODELS)
    for i in range(1, 13):
        if i in FULL:
            path = LOADED[4] if i != 7 else LOADED[5]
            if i == culprit:
                engine["fault"] = "null-content"
                (repo / "sim-engine.json").write_text(json.dumps(engine))
        else:
            path = f"vllm/model_executor/models/{next(others)}.py"
        with (repo / path).open("a") as f:
            f.write(f"# change {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"cherry-pick {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return shas


def _run(root: Path, shas: list[str], name: str, priors: bool) -> tuple[dict[str, Any], int]:
    launches = root / f"launches-{name}"
    data = {
        "candidates": {"repo": str(root / "engine"), "good": shas[0], "bad": shas[-1]},
        "server": {"command": [*sim_command(root / "engine"), "--launch-log", str(launches)],
                   "ready_timeout": 20},
        "checks": [{"type": "expect"}],
        "confirm": False, "localize": {"enabled": False}, "probe": {"early_stop": False},
        "search": {"flake": "auto", "priors": priors},
    }  # fmt: skip
    config = write_config(root / f"{name}.yaml", data)
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(root / name)])
    assert result.exit_code == 0, result.output
    return json.loads((root / name / "result.json").read_text()), len(launches.read_text().split())


@pytest.mark.parametrize("culprit", FULL)
def test_sim_kimi_shape_same_culprit_fewer_starts_with_priors(tmp_path: Path, culprit: int) -> None:
    """The Kimi shape on the simulator, the culprit at each of the three commits that touch a
    loaded file: the same culprit with and without `search.priors`, in fewer server starts
    with them; the golden holds the good end's record, and the report says what the prior
    did."""
    shas = kimi_shape(tmp_path, culprit)
    weighed, with_priors = _run(tmp_path, shas, "priors", True)
    flat, without = _run(tmp_path, shas, "flat", False)
    assert weighed["culprit"]["commit"] == flat["culprit"]["commit"] == shas[culprit]
    assert with_priors < without, (with_priors, without)
    golden = json.loads((tmp_path / "priors" / "golden.json").read_text())
    assert golden["loads"]["commit"] == shas[0]
    assert "vllm/model_executor/models/llama.py" in golden["loads"]["files"]
    assert "vllm/model_executor/models/glm5.py" not in golden["loads"]["files"]
    report = (tmp_path / "priors" / "report.md").read_text()
    assert "- prior (`search.priors`): 9 of 12 candidates weighed low" in report
    assert "prior" not in json.loads((tmp_path / "flat" / "result.json").read_text())["search"]
    assert weighed["search"]["prior"]["low"] == {shas[i]: LOW for i in range(1, 13)
                                                 if i not in FULL}  # fmt: skip
    # `report DIR` weighs as the run did: the prior is in the journal
    (tmp_path / "priors" / "result.json").unlink()
    assert CliRunner().invoke(cli, ["report", str(tmp_path / "priors")]).exit_code == 0
    again = json.loads((tmp_path / "priors" / "result.json").read_text())
    assert again["search"] == weighed["search"]


def test_candidates_shows_each_weight_and_why(tmp_path: Path) -> None:
    """`candidates` with a golden that holds its server's loads: each candidate's weight and
    why, and how many weigh low; without one, that the run records it."""
    shas = kimi_shape(tmp_path, 7)
    engine = tmp_path / "engine"
    golden = {"commit": shas[0], "files": LOADED}
    (tmp_path / "golden.json").write_text(json.dumps({"version": 2, "commit": shas[0],
                                                      "checks": {}, "loads": golden}))  # fmt: skip
    data: dict[str, Any] = {
        "candidates": {"repo": str(engine), "good": shas[0], "bad": shas[-1]},
        "server": {"command": sim_command(engine)},
        "checks": [{"type": "expect"}],
    }
    bare = write_config(tmp_path / "bare.yaml", data)
    named = write_config(tmp_path / "named.yaml", {**data, "golden": "golden.json"})
    out = CliRunner().invoke(cli, ["candidates", str(named)]).output
    assert ("  [prior 0.2, low: touches only vllm/model_executor/models/glm5.py, never loaded]"
            in out), out  # fmt: skip
    assert "  [prior 1, full: touches vllm/attention/backends/cpu.py, loaded]" in out
    assert "priors: 9 of 12 candidates weighed low" in out
    listed = json.loads(CliRunner().invoke(cli, ["candidates", str(named), "--json"]).output)
    weights = [row.get("prior", {}).get("weight") for row in listed["candidates"]]
    assert weights.count(LOW) == 9 and weights.count(1.0) == 3
    assert "priors: none yet" in CliRunner().invoke(cli, ["candidates", str(bare)]).output


def test_replayed_kimi_range_needs_fewer_starts_with_the_prior(tmp_path: Path) -> None:
    """The Kimi range's commits weighed by the record (git only, no server), its verdicts
    replayed through the pure search: fewer starts with the prior, the same culprit, the
    culprit at each of the three positions."""
    shas = kimi_shape(tmp_path, 3)
    source = GitSource(tmp_path / "engine")
    result = {"good": shas[0], "bad": shas[-1], "merge_base": None}
    plan = replay_plan(source, result)
    record = Loads(commit=shas[0], files=LOADED)
    prior = weigh_candidates(source, plan.sequence[1:], record)
    assert sorted(i for i, c in enumerate(plan.sequence) if i and prior[c.commit].low) == [
        i for i in range(1, 13) if i not in FULL
    ]
    weighed = Policy(prior=tuple((c, w.weight) for c, w in prior.items() if w.low))
    for culprit in FULL:
        with_prior = replay(plan, shas[culprit], weighed)
        without = replay(plan, shas[culprit], Policy())
        assert with_prior[1] == without[1] == shas[culprit]
        assert with_prior[0] < without[0], (culprit, with_prior, without)


def test_a_culprit_named_by_trials_before_its_parent_was_probed_sends_the_parent() -> None:
    """Under a prior that weighs candidate 6 above its parent 5, the revert and pick of 6 can
    name it before 5 was ever probed; where one burst of starts holds those verdicts, the
    candidate probed again is 5 (the side with no verdict at all), not 6 for ever (the bench
    looped on it to the budget: no answer)."""
    from llm_bisect.model import Verdict as V
    from llm_bisect.posterior import Placed, Start, fragile

    said = [(0, V.GOOD), (12, V.BAD), (4, V.GOOD), (6, V.BAD)]
    observed = [(i, v, Start(0, float(t))) for t, (i, v) in enumerate(said)]
    trials = [(6, "revert", V.GOOD, Start(0, 4.0)), (6, "pick", V.BAD, Start(0, 5.0))]
    weights = [LOW if i == 5 else 1.0 for i in range(1, 13)]
    assert fragile(13, Placed(observed, trials), V.BAD, Policy(), 6, weights=weights)[0] == 5
