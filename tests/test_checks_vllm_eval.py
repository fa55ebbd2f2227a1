"""vLLM's gsm8k eval files through `gate --eval-config`, on the simulator: the file's check
replaces the default eval, and it runs the questions the file names (GSM8K's test split, as
vLLM's runner builds them) or says in one line what is missing."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import History, cli_bounded, vllm_gsm8k
from llm_bisect.checks.eval import EvalConfig
from llm_bisect.checks.vllm_eval import expand
from llm_bisect.config import parse_config

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
    code, output = cli_bounded(
        "gate", str(h.config()), "--candidate", h.shas[1], "--golden", str(tmp_path / "g.json"),
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
