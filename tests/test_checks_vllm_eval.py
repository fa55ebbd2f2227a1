"""vLLM's gsm8k eval files through `gate --eval-config`, on the simulator: the file's check
replaces the default eval, and it runs the questions the file names (GSM8K's test split, as
vLLM's runner builds them) or says in one line what is missing."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import History, cli_bounded, sim_command, vllm_gsm8k
from llm_bisect.checks.eval import EvalConfig
from llm_bisect.checks.gsm8k import Problem, vllm_prompt
from llm_bisect.checks.vllm_eval import expand
from llm_bisect.config import parse_config
from llm_bisect.errors import ConfigError

VLLM = Path(__file__).parent / "data" / "vllm_evals"
QWEN = VLLM / "Qwen3-0.6B-FP8.yaml"
"""tests/evals/gsm8k/configs/Qwen3-0.6B-FP8.yaml of vLLM at 017e9f4448 (the copy names it):
1319 questions, 5-shot, accuracy_threshold 0.375 (a floor of 0.295)."""


def _offline(tmp_path: Path) -> dict[str, str]:
    """The environment of a node whose `datasets` cache is empty (and the Hub not asked)."""
    return {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1"}  # fmt: skip


def test_gate_eval_config_on_a_default_config_runs_the_files_1319_questions(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """A config without `checks:` (canary, expect, logprobs and the bundled eval) and
    `--eval-config` of vLLM's file: it once failed "2 'eval' checks (files included); one".
    Now the file's eval replaces the bundled one and asks GSM8K's 1319 test questions, 5-shot
    from its train split, from vLLM's copy given with --eval-data."""
    h = history({}, n=3)
    data = vllm_gsm8k(tmp_path / "gsm8k")
    out = tmp_path / "gate"
    log = tmp_path / "requests.jsonl"
    config = h.config(server={"command": sim_command(h.repo, "--request-log", str(log))})
    code, output = cli_bounded(
        "gate", str(config), "--candidate", h.shas[1], "--golden", str(tmp_path / "g.json"),
        "--record", "--good", h.shas[0], "--out", str(out), "--eval-config", str(QWEN),
        "--eval-data", str(data), env=_offline(tmp_path),
    )  # fmt: skip
    assert code == 0, output
    doc = json.loads((out / "gate.json").read_text())
    names = [c["name"] for c in doc["probe"]["checks"]]
    assert names.count("eval") == 1 and {"canary", "expect", "logprobs"} <= set(names), names
    (evaluated,) = [c for c in doc["probe"]["checks"] if c["name"] == "eval"]
    assert len(evaluated["details"]["answers"]) == 1319, "the file's 1319, not the bundled 59"
    assert evaluated["details"]["thresholds"]["min_accuracy"]["value"] == pytest.approx(0.295)
    assert 0.8 < evaluated["score"] < 1, evaluated["evidence"]
    golden = json.loads((tmp_path / "g.json").read_text())
    prompt = golden["checks"]["eval"]
    assert prompt["n"] == 1319
    assert doc["eval_data"] == str(data)
    assert f"--eval-data {data}" in (out / "report.md").read_text()
    # asked as gsm8k_eval.py asks: raw text to /v1/completions (no chat template), the first
    # 5 train rows as worked examples, the runner's stop strings; each test question in turn
    train = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (data / "test.jsonl").read_text().splitlines()]
    shots = "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in train[:5])
    asked = [json.loads(x) for x in log.read_text().splitlines()]
    texts = [a["body"] for a in asked if isinstance(a["body"].get("prompt"), str)]
    assert {a["path"] for a in asked if isinstance(a["body"].get("prompt"), str)} == {
        "/v1/completions"
    }
    assert {t["prompt"] for t in texts} == {
        f"{shots}Question: {r['question']}\nAnswer:" for r in test
    }, "every one of the 1319 questions, and only those"
    assert all(t["stop"] == ["Question", "Assistant:", "<|separator|>"] for t in texts)
    assert len(texts) == 2 * 1319  # the golden's build, then the candidate


def test_a_file_asking_more_questions_than_there_are_is_one_line_and_nothing_starts(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """1319 questions asked of a copy holding 100: vLLM's runner would ask 100 and compare
    them with a floor set on 1319; here it is one line, exit 128, nothing started."""
    h = history({}, n=2)
    data = vllm_gsm8k(tmp_path / "gsm8k", questions=100)
    out = tmp_path / "gate"
    code, output = cli_bounded(
        "gate", str(h.config(checks=[{"type": "expect"}])), "--candidate", h.shas[1],
        "--out", str(out), "--eval-config", str(QWEN), "--eval-data", str(data),
        env=_offline(tmp_path),
    )  # fmt: skip
    assert code == 128, output
    (line,) = output.strip().splitlines()
    said = "llm-bisect: error: --eval-config: 'Qwen3-0.6B-FP8.yaml' asks 1319 GSM8K questions"
    assert line.startswith(said), line
    assert f"'{data}' holds 100" in line and "--eval-data" in line, line
    assert not out.exists()


def test_without_gsm8k_on_the_node_the_file_is_one_line_saying_how_to_give_it(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """With the default eval removed, a file saying `num_questions: 1319` once ran the 64
    bundled problems against vLLM's 0.82-like floor; with no copy given and no openai/gsm8k in
    the node's `datasets` cache, it is one line naming what is missing and how to give it."""
    h = history({}, n=2)
    out = tmp_path / "gate"
    code, output = cli_bounded(
        "gate", str(h.config(checks=[{"type": "expect"}])), "--candidate", h.shas[1],
        "--out", str(out), "--eval-config", str(QWEN), env=_offline(tmp_path),
    )  # fmt: skip
    assert code == 128, output
    (line,) = output.strip().splitlines()
    said = "'Qwen3-0.6B-FP8.yaml' asks 1319 GSM8K questions, 5-shot: cannot load 'openai/gsm8k'"
    assert said in line, line
    assert "--eval-data DIR" in line and "`datasets` cache" in line, line
    assert not out.exists()


def test_a_config_entry_reads_its_data_folder_relative_to_the_config(tmp_path: Path) -> None:
    """`{type: vllm-eval, path: FILE, data: DIR}`: DIR beside the config, read as vLLM's
    copy; a folder without train.jsonl (the worked examples) is one line."""
    shutil.copy(QWEN, tmp_path / "qwen.yaml")
    vllm_gsm8k(tmp_path / "copy")
    entry = {"type": "vllm-eval", "path": "qwen.yaml", "data": "copy"}
    config = parse_config(
        {
            "candidates": {"repo": ".", "good": "a", "bad": "b"},
            "server": {"command": ["serve"]},
            "checks": [entry],
        }
    )
    (check,) = expand(config, tmp_path).checks
    assert isinstance(check, EvalConfig)
    assert (check.dataset, check.limit, check.shots) == (str(tmp_path / "copy"), 1319, 5)
    (tmp_path / "copy" / "train.jsonl").unlink()
    with pytest.raises(Exception, match=r"checks\.0\.path: 'qwen\.yaml' asks 1319 .*train\.jsonl"):
        expand(config, tmp_path)


def test_the_config_naming_its_own_eval_and_a_file_is_one_line(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    h = history({}, n=2)
    data = vllm_gsm8k(tmp_path / "gsm8k")
    config = h.config(checks=[{"type": "expect"}, {"type": "eval"}])
    code, output = cli_bounded(
        "gate", str(config), "--candidate", h.shas[1], "--out", str(tmp_path / "gate"),
        "--eval-config", str(QWEN), "--eval-data", str(data), env=_offline(tmp_path),
    )  # fmt: skip
    assert code == 128, output
    (line,) = output.strip().splitlines()
    assert "'Qwen3-0.6B-FP8.yaml' is an 'eval' check and so is checks.1 of the config" in line


SHIPPED = VLLM / "shipped" / "tests" / "evals" / "gsm8k" / "configs"


def test_gen_prefix_and_use_chat_completions_are_read_as_vllms_runner_reads_them(
    tmp_path: Path,
) -> None:
    """humming/Qwen3.5-4B-quantized.w4a16-humming.yaml writes `gen_prefix` (an empty think
    block after every "Answer:"); DiffusionGemma-26B-A4B-it-FP8-dynamic.yaml asks by chat."""
    data = str(vllm_gsm8k(tmp_path / "gsm8k"))
    got = {}
    for name in (
        "humming/Qwen3.5-4B-quantized.w4a16-humming.yaml",
        "DiffusionGemma-26B-A4B-it-FP8-dynamic.yaml",
        "Qwen3-0.6B-FP8.yaml",
    ):
        entry = {"type": "vllm-eval", "path": str(SHIPPED / name), "data": data}
        config = parse_config(
            {
                "candidates": {"repo": ".", "good": "a", "bad": "b"},
                "server": {"command": ["serve"]},
                "checks": [entry],
            }
        )
        (check,) = expand(config, tmp_path).checks
        assert isinstance(check, EvalConfig)
        got[name.split("/")[-1]] = (check.api, check.gen_prefix, check.extra_body)
        assert check.max_tokens == check.max_tokens_cap == 256, "the runner's, never grown"
    stop = {"stop": ["Question", "Assistant:", "<|separator|>"]}
    assert got == {
        "Qwen3.5-4B-quantized.w4a16-humming.yaml": ("completions", " <think>\n\n</think>\n", stop),
        "DiffusionGemma-26B-A4B-it-FP8-dynamic.yaml": ("chat-completions", "", stop),
        "Qwen3-0.6B-FP8.yaml": ("completions", "", stop),
    }
    shot = Problem("1+1?", "2", "1+1=2\n#### 2")
    assert vllm_prompt("7*6?", [shot], " <think>\n\n</think>\n") == (
        "Question: 1+1?\nAnswer: <think>\n\n</think>\n 1+1=2\n#### 2\n\n"
        "Question: 7*6?\nAnswer: <think>\n\n</think>\n"
    )  # gsm8k_eval.py: f"Answer:{gen_prefix} {answer}" and f"Answer:{gen_prefix}"


def test_an_eval_limit_above_the_problems_there_is_one_line(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """`limit: 100` of the 64 bundled problems once asked 64 and said nothing."""
    h = history({}, n=2)
    config = h.config(checks=[{"type": "eval", "limit": 100}])
    code, output = cli_bounded("candidates", str(config), env=_offline(tmp_path))
    assert code == 2, output
    (line,) = output.strip().splitlines()
    assert "checks.0.limit: 100 problems asked, and 64 are there to ask" in line, line


def _datasets_cache(home: Path, copy: Path) -> Path:
    """HF_HOME as `datasets.load_dataset("openai/gsm8k", "main")` leaves it on a node that was
    online once: the prepared Arrow tables under datasets/openai___gsm8k/main/ (the copy's
    rows, prepared by `datasets` itself, filed under that name)."""
    import datasets  # type: ignore[import-untyped]

    work = home.parent / "prepare"
    files = {split: str(copy / f"{split}.jsonl") for split in ("train", "test")}
    datasets.load_dataset("json", data_files=files, cache_dir=str(work))
    (prepared,) = [p for p in (work / "json").glob("*/*/*") if p.is_dir()]
    dest = home / "datasets" / "openai___gsm8k" / "main" / "0.0.0" / prepared.name
    shutil.copytree(prepared, dest)
    for table in dest.glob("json-*.arrow"):
        table.rename(dest / table.name.replace("json-", "gsm8k-", 1))
    info = json.loads((dest / "dataset_info.json").read_text())
    info.update(config_name="main", dataset_name="gsm8k")
    (dest / "dataset_info.json").write_text(json.dumps(info))
    return home


def test_without_a_copy_the_questions_come_from_the_nodes_datasets_cache(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """No --eval-data: openai/gsm8k from the node's `datasets` cache (offline, as a node
    without the Hub has it), all 1319 test questions asked."""
    h = history({}, n=2)
    home = _datasets_cache(tmp_path / "hf", vllm_gsm8k(tmp_path / "gsm8k"))
    out = tmp_path / "gate"
    code, output = cli_bounded(
        "gate", str(h.config(checks=[{"type": "expect"}])), "--candidate", h.shas[1],
        "--golden", str(tmp_path / "g.json"), "--record", "--good", h.shas[0],
        "--out", str(out), "--eval-config", str(QWEN),
        env={**_offline(tmp_path), "HF_HOME": str(home)},
    )  # fmt: skip
    assert code == 0, output
    doc = json.loads((out / "gate.json").read_text())
    (evaluated,) = [c for c in doc["probe"]["checks"] if c["name"] == "eval"]
    assert len(evaluated["details"]["answers"]) == 1319 and evaluated["passed"], evaluated


def test_a_gsm8k_files_env_reaches_the_server(tmp_path: Path) -> None:
    """moe-refactor/Qwen3-30B-A3B-Fp8-CT-Block-deepgemm.yaml sets VLLM_USE_DEEP_GEMM=1 and
    VLLM_USE_DEEP_GEMM_MOE=1 (the kernels it tests): they were dropped; now they are the
    server's, and a config that sets one otherwise is one line."""
    path = SHIPPED / "moe-refactor" / "Qwen3-30B-A3B-Fp8-CT-Block-deepgemm.yaml"
    entry = {"type": "vllm-eval", "path": str(path), "data": str(vllm_gsm8k(tmp_path / "d"))}

    def config(env: dict[str, str]) -> Any:
        return parse_config(
            {
                "candidates": {"repo": ".", "good": "a", "bad": "b"},
                "server": {"command": ["serve"], "env": env},
                "checks": [entry],
            }
        )

    got = expand(config({"HF_HOME": "/models"}), tmp_path)
    assert got.server.env == {
        "HF_HOME": "/models",
        "VLLM_USE_DEEP_GEMM": "1",
        "VLLM_USE_DEEP_GEMM_MOE": "1",
    }
    with pytest.raises(ConfigError, match=r"sets env VLLM_USE_DEEP_GEMM='1' and the config '0'"):
        expand(config({"VLLM_USE_DEEP_GEMM": "0"}), tmp_path)


def test_eval_data_for_a_file_that_reads_none_is_one_line(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """--eval-data beside an lm-eval-harness file was dropped without a word."""
    h = history({}, n=2)
    code, output = cli_bounded(
        "gate", str(h.config(checks=[{"type": "expect"}])), "--candidate", h.shas[1],
        "--out", str(tmp_path / "gate"), "--eval-config", str(VLLM / "Qwen2.5-1.5B-Instruct.yaml"),
        "--eval-data", str(vllm_gsm8k(tmp_path / "gsm8k", questions=10)), env=_offline(tmp_path),
    )  # fmt: skip
    assert code == 128, output
    (line,) = output.strip().splitlines()
    assert line == (
        "llm-bisect: error: --eval-data: only a gsm8k file reads its questions from it; "
        "'Qwen2.5-1.5B-Instruct.yaml' is a lm-eval-harness file"
    ), line
