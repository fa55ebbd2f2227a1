"""The eval's problems from local files and dataset folders, in vLLM's own prompt format."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import datasets  # type: ignore[import-untyped]
import pytest
from typer.testing import CliRunner

from helpers import History, cli_bounded
from llm_bisect.checks.dataset import load
from llm_bisect.checks.gsm8k import (
    MAX_EVAL_BYTES,
    Problem,
    last_integer,
    load_problems,
    vllm_prompt,
)
from llm_bisect.cli import cli
from llm_bisect.services.bisection import check_one
from llm_bisect.services.golden import record_golden
from llm_bisect.services.setup import setup
from llm_bisect.terminal import TerminalProgress

ROWS = [
    {"question": p.question, "answer": f"Work it out.\n#### {p.answer}"} for p in load_problems()
]


def test_vllm_format_is_few_shot_question_answer_and_the_last_integer() -> None:
    shots = [Problem("1+1?", "2", "1+1=2\n#### 2"), Problem("2+3?", "5", "2+3=5\n#### 5")]
    assert vllm_prompt("7*6?", shots) == (
        "Question: 1+1?\nAnswer: 1+1=2\n#### 2\n\n"
        "Question: 2+3?\nAnswer: 2+3=5\n#### 5\n\n"
        "Question: 7*6?\nAnswer:"
    )
    assert last_integer("so 1,234 apples, then 42.") == "42"
    assert last_integer("The answer is 1,234") == "1234" and last_integer("none") is None


def test_a_parquet_file_and_a_dataset_folder_give_the_same_problems(tmp_path: Path) -> None:
    datasets.Dataset.from_list(ROWS[:20]).to_parquet(str(tmp_path / "gsm8k.parquet"))
    from_file = load(path=tmp_path / "gsm8k.parquet", shots=3, limit=10)
    assert len(from_file.shots) == 3 and len(from_file.asked) == 10
    assert from_file.asked[0].question == ROWS[3]["question"]
    folder = tmp_path / "gsm8k-local"
    folder.mkdir()
    for split, rows in (("train", ROWS[:5]), ("test", ROWS[5:25])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_folder = load(dataset=str(folder), shots=2)
    assert [p.question for p in from_folder.shots] == [r["question"] for r in ROWS[:2]]
    assert len(from_folder.asked) == 20 and from_folder.asked[0].question == ROWS[5]["question"]


def test_each_set_of_problems_is_named_by_what_it_is_and_its_size(tmp_path: Path) -> None:
    """What every figure of the eval is labelled with: the bundled set is not GSM8K and says
    so; a user's file by its name and size (and the part a `limit` kept); a dataset folder
    by its split's file; a hub dataset by its name and split."""
    assert load().name == "bundled arithmetic, 64 problems, not GSM8K"
    assert load(limit=10).name == "bundled arithmetic, the first 10 of 64 problems, not GSM8K"
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:1319]))
    assert load(path=tmp_path / "mine.jsonl").name == "mine.jsonl, 64 problems"
    assert load(path=tmp_path / "mine.jsonl", shots=4).name == "mine.jsonl, 60 problems"
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    for split, rows in (("train", ROWS[:5]), ("test", ROWS[5:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load(dataset=str(folder), limit=50).name == (
        "gsm8k/test.jsonl, the first 50 of 59 problems"
    )


def test_an_eval_in_vllm_format_records_and_judges(tmp_path: Path, history: Any) -> None:
    h: History = history({0: "none", 1: "numerics"}, n=1)
    datasets.Dataset.from_list(ROWS[:40]).to_parquet(str(h.root / "gsm8k.parquet"))
    config = h.config(
        checks=[{"type": "eval", "path": "gsm8k.parquet", "format": "vllm", "shots": 5}]
    )
    s = setup(config, {})
    golden = record_golden(s, h.shas[0], tmp_path / "golden.json", tmp_path / "g")
    assert golden.checks.eval is not None and golden.checks.eval.n == 35
    assert 0.8 < golden.checks.eval.accuracy < 1
    verdicts = {}
    for i, name in enumerate(("good", "numerics")):
        s = setup(config, {})
        _, outcome = check_one(
            s, h.shas[i], tmp_path / name, TerminalProgress(), tmp_path / "golden.json"
        )
        verdicts[name] = outcome.verdict.value
    assert verdicts == {"good": "good", "numerics": "bad"}


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (
            {"dataset": "no-such-org/no-such-set"},
            "checks.0.dataset: cannot load 'no-such-org/no-such-set'",
        ),
        ({"path": "x.jsonl", "dataset": "openai/gsm8k"}, "give path or dataset, not both"),
        (
            {"format": "vllm", "shots": 32, "limit": 5, "path": "small.jsonl"},
            "checks.0.shots: 32 examples leave none",
        ),
    ],
)
def test_an_eval_source_that_cannot_be_read_is_one_line(
    tmp_path: Path, history: Any, check: dict[str, Any], message: str
) -> None:
    h: History = history({}, n=1)
    (h.root / "small.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:10]))
    config = h.config(checks=[{"type": "eval", **check}])
    result = CliRunner().invoke(cli, ["candidates", str(config)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output


def sparse(path: Path, size: int) -> None:
    with path.open("wb") as f:
        f.truncate(size)


@pytest.mark.parametrize(
    ("name", "make", "reason"),
    [
        ("fifo.jsonl", os.mkfifo, "not a regular file: a fifo"),
        ("zero.jsonl", lambda p: p.symlink_to("/dev/zero"), "not a regular file: a device"),
        ("fifo.parquet", os.mkfifo, "not a regular file: a fifo"),
        ("big.jsonl", lambda p: sparse(p, MAX_EVAL_BYTES + 1), "over"),
    ],
)
def test_an_eval_path_that_is_no_regular_file_is_one_line(
    tmp_path: Path, history: Any, name: str, make: Any, reason: str
) -> None:
    """A FIFO used to hang `candidates` forever and /dev/zero to grow until the OOM killer
    came: refused before anything is read."""
    h: History = history({}, n=1)
    make(h.root / name)
    code, output = cli_bounded("candidates", str(h.config(checks=[{"type": "eval", "path": name}])))
    assert code == 2, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: checks.0.path: cannot read '{name}' ({reason}"
        + (f" {MAX_EVAL_BYTES} bytes)" if reason == "over" else ")")
    ]


class _Hub(http.server.BaseHTTPRequestHandler):
    """A Hugging Face Hub on loopback that knows no dataset, and counts what it is asked."""

    asked: ClassVar[list[str]] = []

    def _none(self) -> None:
        self.asked.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _none

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[tuple[str, list[str]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hub.asked.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Hub.asked
    finally:
        server.shutdown()
        server.server_close()


def test_an_unknown_hub_dataset_is_one_line_and_asks_no_hub(
    tmp_path: Path, history: Any, hub: tuple[str, list[str]]
) -> None:
    """Without `download: true` a dataset comes from the node's cache or a local folder: a
    misspelt name is one line at once, not five retries of the Hub (28 s without network)."""
    url, asked = hub
    h: History = history({}, n=1)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env |= {"HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf")}
    check = {"type": "eval", "dataset": "no-such-org/no-such-set"}
    code, output = cli_bounded("candidates", str(h.config(checks=[check])), env=env)
    assert code == 2, output
    assert asked == []  # offline: nothing was asked of the Hub
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "checks.0.dataset: cannot load 'no-such-org/no-such-set'" in lines[0]
    assert "download: true" in lines[0]
    code, output = cli_bounded(
        "candidates", str(h.config(checks=[{**check, "download": True}])), env=env
    )
    assert code == 2, output
    assert asked  # asked for: the Hub is asked
