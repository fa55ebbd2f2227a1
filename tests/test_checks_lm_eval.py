"""The lm_eval check: lm-evaluation-harness run for real (from the vllm venv, where CI
installs it) on a local task against the simulator; its command line, per-document
results and paired judgement; vLLM's own eval config files read into checks."""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from helpers import History, vllm_gsm8k, write_config
from llm_bisect.checks.eval import EvalConfig
from llm_bisect.checks.golden import Golden, Sections
from llm_bisect.checks.lm_eval import (
    LAUNCH,
    LOCAL_ONLY,
    LmEvalCheck,
    LmEvalConfig,
    LmEvalDetails,
    SampleRun,
    command,
    holm,
    judge_task,
    judge_tasks,
    lm_eval_argv,
    read_samples,
)
from llm_bisect.checks.stats import PairedTest
from llm_bisect.checks.vllm_eval import expand
from llm_bisect.cli import cli
from llm_bisect.client import OpenAIClient
from llm_bisect.config import parse_config
from llm_bisect.errors import ConfigError, HarnessError
from llm_bisect.sim.server import Engine, serve
from llm_bisect.templates import fill

DATA = Path(__file__).parent / "data"
TASKS = DATA / "lm_eval"
VLLM = DATA / "vllm_evals"
COMMIT = "ab" * 20


def lm_eval_python() -> str:
    """The interpreter with lm_eval: the vllm venv's (scripts/test installs it there)."""
    python = os.environ.get("LLM_BISECT_VLLM_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("CI must provide LLM_BISECT_VLLM_PYTHON (scripts/test adds lm-eval)")
        pytest.skip("LLM_BISECT_VLLM_PYTHON is not set (a venv with lm-eval)")
    has = subprocess.run([python, "-c", "import lm_eval"], capture_output=True, check=False)
    if has.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI: {python} has no lm_eval (scripts/test installs lm-eval[api])")
        pytest.skip(f"{python} has no lm_eval: uv pip install --python {python} 'lm-eval[api]'")
    return python


@contextmanager
def sim(fault: str) -> Iterator[OpenAIClient]:
    server = serve(Engine(COMMIT, fault, "reasoning", {}), 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        with OpenAIClient(f"http://127.0.0.1:{server.server_address[1]}") as client:
            yield client
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


ARITH = "exact_match,strict-match"


def test_lm_eval_on_a_local_task_tells_a_garbled_build_from_the_good_one() -> None:
    """lm-eval itself, offline, on a local task YAML over a local JSONL: the good build's
    per-document results become the golden; the good build passes against it, a build that
    garbles arithmetic fails, paired (every document lost) and below the absolute floor."""
    python = lm_eval_python()
    cfg = LmEvalConfig(
        type="lm_eval",
        tasks=["llm_bisect_arith"],
        include_path=str(TASKS),
        api="chat-completions",
        python=python,
        limit=12,
        thresholds={"llm_bisect_arith": {ARITH: 0.9}},
    )
    check = LmEvalCheck(cfg, lm_eval_argv(python), TASKS)
    assert check.lm_eval[2].startswith(LOCAL_ONLY), "a local task: lm-eval indexes its folder only"
    seconds = []
    with sim("none") as good:
        t0 = time.monotonic()
        section = check.record(good)
        seconds.append(time.monotonic() - t0)
        golden = Golden(version=2, commit=COMMIT, checks=Sections(lm_eval=section))
        t0 = time.monotonic()
        again = check.run(good, golden)
        seconds.append(time.monotonic() - t0)
    run = section.tasks["llm_bisect_arith"]
    assert run.metric == ARITH and run.doc_ids == list(range(12)) and all(run.correct), run
    assert again.passed, again.evidence
    assert "llm_bisect_arith exact_match,strict-match 1.000 (golden 1.000)" in again.evidence
    with sim("garbled-math") as bad:
        t0 = time.monotonic()
        result = check.run(bad, golden)
        seconds.append(time.monotonic() - t0)
    assert not result.passed
    assert "12 lost, 0 gained" in result.evidence, result.evidence
    assert "below the threshold 0.900" in result.evidence, result.evidence
    details = result.details
    assert isinstance(details, LmEvalDetails)
    (task,) = details.tasks
    assert task.task == "llm_bisect_arith" and task.value == 0.0 and not task.passed
    assert task.golden_value == 1.0 and task.floor == {ARITH: 0.9}
    assert "--model" in details.command and details.seconds > 0
    print(f"\nlm-eval per probe (12 documents): {', '.join(f'{s:.1f}s' for s in seconds)}")


def test_the_command_asks_the_endpoint_as_text_with_the_served_name(tmp_path: Path) -> None:
    cfg = LmEvalConfig(
        type="lm_eval",
        tasks=["gsm8k", "mine"],
        api="chat-completions",
        limit=50,
        num_fewshot=5,
        gen_kwargs={"max_gen_toks": 2048},
        chat_template_kwargs={"enable_thinking": False},
        fewshot_as_multiturn=True,
        num_concurrent=16,
    )
    argv = command(cfg, ["lm_eval"], "http://127.0.0.1:8000", "served", tmp_path, tmp_path)
    args = json.loads(argv[argv.index("--model_args") + 1])
    assert argv[argv.index("--model") + 1] == "local-chat-completions"
    assert args == {
        "model": "served",
        "base_url": "http://127.0.0.1:8000/v1/chat/completions",
        "num_concurrent": 16,
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "max_retries": 1,
    }
    assert argv[argv.index("--tasks") + 1] == "gsm8k,mine"
    assert json.loads(argv[argv.index("--gen_kwargs") + 1]) == {
        "max_gen_toks": 2048,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    for flag in ("--log_samples", "--apply_chat_template", "--fewshot_as_multiturn"):
        assert flag in argv
    assert argv[argv.index("--include_path") + 1] == str(tmp_path)
    assert argv[argv.index("--limit") + 1] == "50" and argv[argv.index("--num_fewshot") + 1] == "5"
    plain = command(
        LmEvalConfig(type="lm_eval", tasks=["t"]), ["lm_eval"], "http://h:1/", "m", tmp_path, None
    )
    assert plain[plain.index("--model") + 1] == "local-completions"
    assert "http://h:1/v1/completions" in plain[plain.index("--model_args") + 1]
    assert "--apply_chat_template" not in plain and "--include_path" not in plain


def _samples(out: Path, task: str, right: list[bool]) -> None:
    folder = out / "served"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, ok in enumerate(right):
        for kind, value in (("strict-match", float(ok)), ("flexible-extract", 1.0)):
            lines.append({"doc_id": i, "filter": kind, "metrics": ["exact_match"],
                          "exact_match": value})  # fmt: skip
    (folder / f"samples_{task}_2026-12-02T05-39-34.937383.jsonl").write_text(
        "\n".join(json.dumps(x) for x in reversed(lines)) + "\n"
    )
    results = {task: {"exact_match,strict-match": sum(right) / len(right),
                      "exact_match_stderr,strict-match": 0.1,
                      "exact_match,flexible-extract": 1.0, "alias": task}}  # fmt: skip
    (folder / "results_2026-12-02T05-39-34.937383.json").write_text(
        json.dumps({"results": results})
    )


def test_lm_eval_indexes_only_the_include_path_when_every_task_is_there() -> None:
    python = ["python", "-c", LAUNCH]
    mine = LmEvalConfig(type="lm_eval", tasks=["llm_bisect_arith", "llm_bisect_known"])
    assert LmEvalCheck(mine, python, TASKS).lm_eval[2] == LOCAL_ONLY + LAUNCH
    hub = LmEvalConfig(type="lm_eval", tasks=["llm_bisect_arith", "gsm8k"])
    assert LmEvalCheck(hub, python, TASKS).lm_eval[2] == LAUNCH
    assert LmEvalCheck(mine, python, None).lm_eval[2] == LAUNCH


def test_per_document_results_are_read_by_metric_and_filter(tmp_path: Path) -> None:
    _samples(tmp_path, "gsm8k_cot", [True, False, True, True])
    (run,) = read_samples(tmp_path, ["gsm8k_cot"], None).values()
    assert run.metric == "exact_match,strict-match" and run.doc_ids == [0, 1, 2, 3]
    assert run.correct == [True, False, True, True] and run.value == 0.75
    assert run.values == {"exact_match,strict-match": 0.75, "exact_match,flexible-extract": 1.0}
    flexible = read_samples(tmp_path, ["gsm8k_cot"], "exact_match,flexible-extract")
    assert all(flexible["gsm8k_cot"].correct)


def test_a_task_is_judged_paired_against_the_golden_and_by_its_floor() -> None:
    n = 40
    gold = SampleRun(metric=ARITH, value=0.9, doc_ids=list(range(n)),
                     correct=[i % 10 != 0 for i in range(n)])  # fmt: skip
    # six of the golden's right answers lost and one gained is chance (p = 8/128 > 0.05);
    # seven lost and none gained is not (p = 1/128)
    lost6 = [c if i not in (1, 2, 3, 4, 5, 6) else False for i, c in enumerate(gold.correct)]
    lost6[0] = True
    test = PairedTest()
    six = SampleRun(metric=ARITH, value=0.775, doc_ids=gold.doc_ids, correct=lost6)
    judged = judge_task("t", six, gold, {}, test)
    assert judged.passed and (judged.lost, judged.gained) == (6, 1), judged
    lost7 = [c if i not in range(1, 8) else False for i, c in enumerate(gold.correct)]
    seven = SampleRun(metric=ARITH, value=0.725, doc_ids=gold.doc_ids, correct=lost7)
    judged = judge_task("t", seven, gold, {ARITH: 0.8}, test)
    assert not judged.passed and judged.p_value == 1 / 128
    assert judged.failures[0].startswith("t: exact_match,strict-match 72% vs golden 90%")
    assert judged.failures[1] == "t: exact_match,strict-match 0.725 below the threshold 0.800"
    assert 0 < judged.detectable_drop < 1
    alone = judge_task("t", seven, None, {ARITH: 0.7}, test)  # no golden: the floor alone
    assert alone.passed and alone.n == 0


def _config(tmp_path: Path, check: dict[str, object], **server: object) -> dict[str, object]:
    return {
        "candidates": {"repo": ".", "good": "a", "bad": "b"},
        "server": {"command": ["serve", "--port", "{port}"], **server},
        "checks": [check],
    }


def test_a_vllm_gsm8k_config_becomes_the_eval_check_with_its_floor(tmp_path: Path) -> None:
    """tests/evals/gsm8k/configs/DeepSeek-R1-DP.yaml as vLLM's runner reads it: vLLM's
    few-shot GSM8K, 1319 questions, 5 shots, pass at accuracy >= 0.95 - 0.08; its server_args
    on the command, its startup wait as the ready timeout."""
    path = VLLM / "DeepSeek-R1-DP.yaml"
    entry = {"type": "vllm-eval", "path": str(path), "data": str(vllm_gsm8k(tmp_path / "gsm8k"))}
    config = parse_config(_config(tmp_path, entry))
    got = expand(config, tmp_path)
    (check,) = got.checks
    assert isinstance(check, EvalConfig)
    assert (check.format, check.limit, check.shots, check.max_tokens) == ("vllm", 1319, 5, 256)
    assert check.min_accuracy == pytest.approx(0.87)
    assert [fill(a, {"port": "8000"}) for a in got.server.command[3:]] == [
        "--enforce-eager",
        "--max-model-len",
        "4096",
        "--data-parallel-size",
        "8",
        "--enable-expert-parallel",
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":3}',
    ]  # fmt: skip  (JSON in server_args is data, never a placeholder)
    assert got.server.ready_timeout == 1200
    said = parse_config(_config(tmp_path, entry, ready_timeout=90.0))
    assert expand(said, tmp_path).server.ready_timeout == 90  # the config's own wins


def test_an_lm_eval_harness_config_becomes_the_lm_eval_check_with_its_floors(
    tmp_path: Path,
) -> None:
    """.buildkite/lm-eval-harness/configs/*.yaml: each task's metrics, passing at
    value * (1 - rtol 0.08); the model keys the runner gives vLLM go on the command."""
    qwen = VLLM / "Qwen2.5-1.5B-Instruct.yaml"
    config = parse_config(_config(tmp_path, {"type": "vllm-eval", "path": str(qwen)}))
    (check,) = expand(config, tmp_path).checks
    assert check.type == "lm_eval" and check.tasks == ["gsm8k"]
    assert check.thresholds["gsm8k"] == pytest.approx(
        {"exact_match,strict-match": 0.54 * 0.92, "exact_match,flexible-extract": 0.59 * 0.92}
    )
    assert (check.limit, check.num_fewshot, check.source) == (1319, 5, str(qwen))
    nemotron = VLLM / "NVIDIA-Nemotron-3-Nano-30B-A3B-FP8.yaml"
    config = parse_config(_config(tmp_path, {"type": "vllm-eval", "path": str(nemotron)}))
    got = expand(config, tmp_path)
    (check,) = got.checks
    assert check.apply_chat_template is True and check.fewshot_as_multiturn is True
    assert check.api == "chat-completions"  # vLLM applies the template: no tokenizer here
    assert got.server.command[3:] == [
        "--max-model-len", "262144", "--kv-cache-dtype", "fp8",
        "--moe-backend", "flashinfer_cutlass", "--trust-remote-code",
    ]  # fmt: skip
    oss = VLLM / "gpt-oss-20b-marlin.yaml"
    got = expand(parse_config(_config(tmp_path, {"type": "vllm-eval", "path": str(oss)})), tmp_path)
    (check,) = got.checks
    assert check.type == "lm_eval" and check.api == "chat-completions"
    assert check.gen_kwargs == {"reasoning_effort": "low"}
    assert check.thresholds == {
        "gpqa_diamond_cot_zeroshot": {"exact_match,flexible-extract": pytest.approx(0.518)}
    }
    assert got.server.command[3:] == [
        "--tensor-parallel-size", "2", "--moe-backend", "marlin", "--linear-backend", "marlin"
    ]  # fmt: skip


BAD_FILES = {
    "missing.yaml": None,
    "list.yaml": "- 1\n- 2\n",
    "unknown.yaml": "model_name: x\nfoo: 1\n",
    "no-questions.yaml": "model_name: x\naccuracy_threshold: 0.5\nnum_fewshot: 5\n",
    "wrong-type.yaml": "model_name: x\naccuracy_threshold: hi\nnum_questions: 5\nnum_fewshot: 5\n",
    "task-metric.yaml": "model_name: x\ntasks:\n- name: gsm8k\n  metrics:\n  - name: acc\n",
    "not-yaml.yaml": "a: [\n",
    "nan-threshold.yaml": "model_name: x\naccuracy_threshold: .nan\nnum_questions: 5\n"
    "num_fewshot: 5\n",
    "nan-rtol.yaml": "model_name: x\nrtol: .nan\ntasks:\n- name: t\n  metrics:\n"
    "  - {name: acc, value: 0.5}\n",
    "nan-value.yaml": "model_name: x\ntasks:\n- name: t\n  metrics:\n"
    "  - {name: acc, value: .nan}\n",
    "inf-wait.yaml": "model_name: x\naccuracy_threshold: 0.5\nnum_questions: 5\nnum_fewshot: 5\n"
    "startup_max_wait_seconds: .inf\n",
    "huge-wait.yaml": "model_name: x\naccuracy_threshold: 0.5\nnum_questions: 5\nnum_fewshot: 5\n"
    f"startup_max_wait_seconds: {'9' * 400}\n",
    "quote.yaml": "model_name: x\naccuracy_threshold: 0.5\nnum_questions: 5\nnum_fewshot: 5\n"
    'server_args: "--a \'b"\n',
}
SAID = {
    "missing.yaml": "cannot read",
    "list.yaml": "is not a vLLM eval config (not a mapping)",
    "unknown.yaml": "is not a vLLM eval config this llm-bisect reads",
    "no-questions.yaml": "required key 'num_questions' is missing",
    "wrong-type.yaml": "'accuracy_threshold' must be a number, got 'hi'",
    "task-metric.yaml": "tasks.0.metrics.0: required key 'value' is missing",
    "not-yaml.yaml": "is not YAML text",
    "nan-threshold.yaml": "'accuracy_threshold' must be a number from 0 to 1, got nan",
    "nan-rtol.yaml": "'rtol' must be a number from 0 to 1, got nan",
    "nan-value.yaml": "tasks.0.metrics.0: 'value' must be a number",
    "inf-wait.yaml": "'startup_max_wait_seconds' must be a number from 0 to 604800, got inf",
    "huge-wait.yaml": "'startup_max_wait_seconds' must be a number from 0 to 604800, got 999",
    "quote.yaml": "'server_args' cannot be split into words (No closing quotation)",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_vllm_eval_file_is_one_line_and_nothing_starts(tmp_path: Path, name: str) -> None:
    """`gate --eval-config FILE` (exit 128, as every gate input error) and a config's
    `vllm-eval` entry (the config error every other command gives) name the file."""
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    text = BAD_FILES[name]
    if text is not None:
        (tmp_path / name).write_text(text)
    data = _config(tmp_path, {"type": "canary"})
    data["candidates"] = {"repo": "repo", "good": "a", "bad": "b"}
    data["server"] = {"command": ["python3", "-c", "open('started', 'w')"]}
    config = write_config(tmp_path / "c.yaml", data)
    result = CliRunner().invoke(
        cli, ["gate", str(config), "--candidate", "b", "--eval-config", str(tmp_path / name),
              "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 128, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("llm-bisect: error: --eval-config: "), line
    assert SAID[name] in line and name in line, line
    data["checks"] = [{"type": "vllm-eval", "path": name}]
    config = write_config(tmp_path / "c.yaml", data)
    result = CliRunner().invoke(cli, ["candidates", str(config)])
    (line,) = result.output.strip().splitlines()
    assert line.startswith("llm-bisect: error: checks.0.path: ") and SAID[name] in line, line
    assert not (tmp_path / "started").exists() and not (tmp_path / "out").exists()


def test_candidates_shows_the_command_with_the_files_server_args(
    history: Callable[..., History],
) -> None:
    made = history({5: "garbled-math"}, n=6)
    path = VLLM / "Qwen3-0.6B-FP8.yaml"
    data = str(vllm_gsm8k(made.root / "gsm8k"))
    config = made.config(checks=[{"type": "vllm-eval", "path": str(path), "data": data}])
    result = CliRunner().invoke(cli, ["candidates", str(config)])
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("server: ")]
    assert line.endswith("--enforce-eager --max-model-len 4096 (ready within 20s)"), line
    assert yaml.safe_load(config.read_text())["server"]["ready_timeout"] == 20


def test_gate_with_a_vllm_gsm8k_config_applies_its_floor_beside_the_golden(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """`gate --eval-config FILE` (vLLM's gsm8k format) on the simulator: one golden serves
    both files (thresholds do not shape it); the healthy build (95% right on these 20) passes
    a threshold of 0.5 (floor 0.42: 0.08 below, as vLLM's runner) and is blocked by one of
    0.99 with the file's `tolerance: 0`, each said in the JUnit XML."""
    from test_cli import invoke

    h = history({}, n=4)
    config = h.config(checks=[{"type": "expect"}])
    files = {}
    spec = """server_args: >-\n  --speculative-config '{"method":"dspark",\n  "k":7}'\n"""
    for name, threshold in (("low", f"0.5\n{spec}"), ("high", f"0.99\ntolerance: 0\n{spec}")):
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(
            f"model_name: sim\naccuracy_threshold: {threshold}\nnum_questions: 20\n"
            "num_fewshot: 5\nstartup_max_wait_seconds: 30\n"
        )
    golden = tmp_path / "golden.json"
    data = vllm_gsm8k(tmp_path / "gsm8k", questions=20)
    outcomes = {}
    for name in ("low", "high"):
        out = tmp_path / f"gate-{name}"
        code, output = invoke(
            "gate", str(config), "--candidate", h.shas[2], "--golden", str(golden), "--record",
            "--out", str(out), "--junit", str(out / "junit.xml"),
            "--eval-config", str(files[name]), "--eval-data", str(data),
        )  # fmt: skip
        doc = json.loads((out / "gate.json").read_text())
        (evaluated,) = [c for c in doc["probe"]["checks"] if c["name"] == "eval"]
        suite = ET.parse(out / "junit.xml").getroot()
        (case,) = [c for c in suite if c.get("name") == "eval"]
        outcomes[name] = (code, evaluated, case, doc, output)
    code, evaluated, case, doc, output = outcomes["low"]
    assert code == 0 and evaluated["passed"], output
    assert evaluated["details"]["thresholds"]["min_accuracy"]["value"] == pytest.approx(0.42)
    props = {prop.get("name"): prop.get("value") for prop in case.iter("property")}
    assert float(props["accuracy"] or 0) > 0.5, props  # beside the eval's power and its data
    assert doc["eval_config"] == str(files["low"])
    # JSON in server_args (as DeepSeek-V4-Flash-DSpark-confidence-TP4.yaml) is data: it once
    # crashed gate with KeyError '"method"'
    assert shlex.split(doc["probe"]["fingerprint"]["command"])[-2:] == [
        "--speculative-config",
        '{"method":"dspark", "k":7}',
    ]
    assert f"--eval-config {files['low']}" in (tmp_path / "gate-low" / "report.md").read_text()
    code, evaluated, case, doc, output = outcomes["high"]
    assert code == 1 and not evaluated["passed"], output
    assert "below the threshold 0.990" in evaluated["evidence"], evaluated["evidence"]
    assert case.find("failure") is not None
    assert not doc["golden"]["recorded"], "the first gate's golden served the second file"


def _group(
    rng: random.Random, tasks: int, docs: int, lose: float, gain: float
) -> tuple[dict[str, SampleRun], dict[str, SampleRun]]:
    """An MMLU-like group: the golden's answers and a build's, each answer of the build
    flipped by chance (`lose` of the golden's right ones, `gain` of its wrong ones)."""
    gold, got = {}, {}
    for t in range(tasks):
        right = [rng.random() < 0.7 for _ in range(docs)]
        now = [(rng.random() >= lose) if r else (rng.random() < gain) for r in right]
        ids = list(range(docs))
        gold[f"sub{t}"] = SampleRun(metric="acc", value=0.7, doc_ids=ids, correct=right)
        got[f"sub{t}"] = SampleRun(metric="acc", value=0.7, doc_ids=ids, correct=now)
    return got, gold


def test_a_group_of_57_subtasks_fails_a_good_build_no_more_often_than_one_task() -> None:
    # a build without a drop (3 % of answers change by chance, as many gained as lost):
    # judged task by task at 0.05 each, it failed about half its probes; with Holm's
    # correction the whole group fails it at most 5 % of the time
    rng = random.Random(57)
    test = PairedTest()
    alarms = 0
    for _ in range(200):
        got, gold = _group(rng, 57, 100, lose=0.03 / 2 / 0.7, gain=0.03 / 2 / 0.3)
        alarms += any(not j.passed for j in judge_tasks(got, gold, {}, test))
    assert alarms / 200 <= 0.05 + 0.03, alarms
    # a subtask that really broke is still caught among the 57
    got, gold = _group(rng, 57, 100, lose=0.02, gain=0.02)
    broken = [c and rng.random() < 0.2 for c in got["sub3"].correct]
    got["sub3"] = got["sub3"].model_copy(update={"correct": broken})
    judged = {j.task: j for j in judge_tasks(got, gold, {}, test)}
    assert not judged["sub3"].passed and "Holm over 57 tasks" in judged["sub3"].failures[0]


def test_holm_steps_down_and_stops_at_the_first_it_keeps() -> None:
    assert holm([0.001, 0.04, 0.012], 0.05) == [0.05 / 3, 0.05, 0.05 / 2]
    assert holm([0.001, 0.02, 0.03, 0.04], 0.05) == [0.05 / 4, 0.0, 0.0, 0.0]
    assert holm([0.2, 0.001], 0.05) == [0.0, 0.025]
    assert holm([], 0.05) == []


SHIPPED = sorted((VLLM / "shipped").rglob("*.yaml"))


def _floor(data: dict[str, object]) -> dict[str, object]:
    """The floors vLLM's own runners apply, read as they read them (the files cited in
    checks/vllm_eval.py)."""
    if "accuracy_threshold" in data:
        return {"eval": float(data["accuracy_threshold"]) - float(data.get("tolerance", 0.08))}  # type: ignore[arg-type]
    if "tasks" in data:
        rtol = float(data.get("rtol", 0.08))  # type: ignore[arg-type]
        return {
            t["name"]: {m["name"]: m["value"] * (1 - rtol) for m in t["metrics"]}
            for t in data["tasks"]  # type: ignore[attr-defined]
        }
    return {"gpqa": float(data["metric_threshold"]) - 0.05}  # type: ignore[arg-type]


def test_every_eval_config_vllm_ships_reads_as_vllms_runner_reads_it(tmp_path: Path) -> None:
    """Its floor is vLLM's, its server_args reach the server word for word (JSON in them
    included: a brace once crashed gate, run and golden with KeyError '"method"'); a file
    of a format not read here (mrcr) is one line naming it."""
    assert len(SHIPPED) > 150
    read, refused = 0, []
    gsm8k = str(vllm_gsm8k(tmp_path / "gsm8k"))
    for path in SHIPPED:
        data = yaml.safe_load(path.read_text())
        entry = {"type": "vllm-eval", "path": str(path)}
        if "accuracy_threshold" in (data or {}):  # a gsm8k file: its questions from the copy
            entry["data"] = gsm8k
        config = parse_config(_config(tmp_path, entry))
        try:
            got = expand(config, tmp_path)
        except ConfigError as exc:
            assert "\n" not in str(exc) and path.name in str(exc), exc
            refused.append(path.name)
            continue
        read += 1
        (check,) = got.checks
        floor = _floor(data)
        if check.type == "eval":
            assert check.min_accuracy == pytest.approx(max(0.0, floor["eval"])), path  # type: ignore[arg-type]
        elif "gpqa" in floor:
            (task,) = check.thresholds.values()
            assert list(task.values()) == [pytest.approx(max(0.0, floor["gpqa"]))], path  # type: ignore[arg-type]
        else:
            assert check.thresholds.keys() == floor.keys(), path
            for name, want in floor.items():
                assert check.thresholds[name] == pytest.approx(want), path
        words = [fill(a, {"port": "8000"}) for a in got.server.command[3:]]
        said = shlex.split(data.get("server_args") or "")
        assert words[: len(said)] == said, path
    # all commented out ("TODO(rob): enable"); tests/evals/mrcr: needles, not a floor this reads
    assert refused == ["Mixtral-8x7B-Fp8-AutoFp8-fi-cutlass.yaml", "Qwen3.5-4B.yaml"]
    assert read == len(SHIPPED) - 2


def test_rtol_zero_means_zero_as_in_vllms_runner(tmp_path: Path) -> None:
    """`rtol: 0` once became 0.08 (`or LM_EVAL_RTOL`); vLLM reads `get("rtol", DEFAULT)`."""
    path = tmp_path / "exact.yaml"
    path.write_text("model_name: x\nrtol: 0\ntasks:\n- name: t\n  metrics:\n"
                    "  - {name: acc, value: 0.5}\n")  # fmt: skip
    (check,) = expand(
        parse_config(_config(tmp_path, {"type": "vllm-eval", "path": str(path)})), tmp_path
    ).checks
    assert check.thresholds == {"t": {"acc": 0.5}}


MALFORMED = {
    "results not JSON": ("results", "{not json"),
    "results a list": ("results", '{"results": [1, 2]}'),
    "sample not JSON": ("samples", "{oops\n"),
    "sample without doc_id": ("samples", '{"filter": "none", "metrics": ["acc"], "acc": 1}\n'),
    "doc_id not an integer": ("samples", '{"doc_id": "7", "metrics": ["acc"], "acc": 1}\n'),
    "sample a list": ("samples", "[1]\n"),
    "samples without metrics": ("samples", '{"doc_id": 0, "filter": "none", "resps": []}\n'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_output_lm_eval_never_writes_is_a_harness_error_naming_the_file(
    tmp_path: Path, case: str
) -> None:
    """Each was "internal error (a bug in llm-bisect)", exit 129, ending a bisection."""
    _samples(tmp_path, "arith", [True, True])
    which, text = MALFORMED[case]
    (found,) = (tmp_path / "served").glob(f"{which}_*")
    found.write_text(text)
    with pytest.raises(HarnessError) as caught:
        read_samples(tmp_path, ["arith"], None)
    assert "\n" not in str(caught.value) and found.name in str(caught.value), caught.value


def test_samples_of_older_lm_eval_without_a_metrics_key_are_read(tmp_path: Path) -> None:
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "samples_arith_2024-01-02T05-39-34.937383.jsonl").write_text(
        "\n".join(json.dumps({"doc_id": i, "filter": "none", "resps": [], "acc": float(i != 1)})
                  for i in range(3)) + "\n"
    )  # fmt: skip
    (run,) = read_samples(tmp_path, ["arith"], None).values()
    assert run.metric == "acc,none" and run.correct == [True, False, True]


def test_a_nan_metric_fails_its_floor_and_is_written_as_no_number(tmp_path: Path) -> None:
    """`check` once exited 0 "pass ... nan", and gate then crashed writing gate.json."""
    _samples(tmp_path, "arith", [True, True])
    (found,) = (tmp_path / "served").glob("results_*")
    found.write_text('{"results": {"arith": {"exact_match,strict-match": NaN}}}')
    (run,) = read_samples(tmp_path, ["arith"], None).values()
    assert run.not_numbers == [ARITH] and ARITH not in run.values
    judged = judge_task("arith", run, None, {ARITH: 0.5}, PairedTest())
    assert not judged.passed
    assert judged.failures == [f"arith: lm-eval reported {ARITH} as no number (NaN or infinite)"]
    for text in (run.model_dump_json(), judged.model_dump_json()):  # standard JSON: numbers
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} written"))


FAKE_LM_EVAL = """#!{python}
import json, os, pathlib, sys
if "--output_path" not in sys.argv:  # is lm_eval there?
    sys.exit(0)
out = pathlib.Path(sys.argv[sys.argv.index("--output_path") + 1]) / "served"
out.mkdir(parents=True)
(out / "samples_arith_2026-01-01T00-00-00.0.jsonl").write_text(
    json.dumps({{"doc_id": 0, "filter": "strict-match", "metrics": ["exact_match"],
                "exact_match": 1.0}}) + "\\n")
(out / "results_2026-01-01T00-00-00.0.json").write_text(os.environ["FAKE_RESULTS"])
"""


def test_check_on_what_lm_eval_wrote_says_one_line_and_a_nan_blocks_the_gate(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """The harness's edge (its interpreter) is a script writing what a broken lm-eval would:
    unreadable results are one line, exit 128; a NaN metric is a failed floor, and gate.json
    is written."""
    import sys

    from test_cli import invoke

    fake = tmp_path / "lm-eval-python"
    fake.write_text(FAKE_LM_EVAL.format(python=sys.executable))
    fake.chmod(0o755)
    h = history({}, n=2)
    check = {"type": "lm_eval", "tasks": ["arith"], "python": str(fake),
             "thresholds": {"arith": {ARITH: 0.5}}}  # fmt: skip
    config = h.config(checks=[check])
    env = {"FAKE_RESULTS": "{broken"}
    code, said = invoke("check", str(config), "--candidate", h.shas[1], env=env)
    assert code == 128, said
    (line,) = [x for x in said.splitlines() if "llm-bisect: error" in x]
    assert "lm-eval wrote 'results_2026-01-01T00-00-00.0.json' that is not JSON" in line, said
    env = {"FAKE_RESULTS": json.dumps({"results": {"arith": {ARITH: float("nan")}}})}
    out = tmp_path / "gate"
    code, said = invoke("gate", str(config), "--candidate", h.shas[1], "--out", str(out),
                        "--golden", str(tmp_path / "golden.json"), "--record", env=env)  # fmt: skip
    assert code == 1, said
    doc = json.loads((out / "gate.json").read_text())
    (lm,) = [c for c in doc["probe"]["checks"] if c["name"] == "lm_eval"]
    assert "as no number (NaN or infinite)" in lm["evidence"], lm


def test_a_document_given_twice_and_a_huge_integer_are_read_not_a_traceback(
    tmp_path: Path,
) -> None:
    _samples(tmp_path, "arith", [True, False])
    (samples,) = (tmp_path / "served").glob("samples_*")
    line = {"doc_id": 0, "filter": "strict-match", "metrics": ["exact_match"],
            "exact_match": None}  # fmt: skip
    samples.write_text(samples.read_text() + json.dumps(line) + "\n")
    (results,) = (tmp_path / "served").glob("results_*")
    results.write_text('{"results": {"arith": {"exact_match,strict-match": 1' + "0" * 400 + "}}}")
    (run,) = read_samples(tmp_path, ["arith"], None).values()
    assert run.doc_ids == [0, 1] and run.not_numbers == [ARITH]
