"""What every launcher shares: the log tail a skipped probe carries into its report."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_bisect.launchers.common import placement_facts
from llm_bisect.logs import LINE_CHARS, SCAN_BYTES, tail

REASON = "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_a_long_line_after_the_crash_keeps_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"INFO loading weights\n{REASON}\n{'#' * 70_000}\n")
    found = tail(log, 20, [])
    assert REASON in found.splitlines()
    assert all(len(line) <= LINE_CHARS + 40 for line in found.splitlines())
    assert "INFO loading weights" in found


def test_error_lines_from_before_the_last_lines_are_kept(tmp_path: Path) -> None:
    """The reason, then the crash's many lines of teardown noise: the reason stays, above the
    last lines, which come in their order."""
    log = tmp_path / "server.log"
    noise = [f"INFO shutting down worker {i}" for i in range(200)]
    log.write_text("\n".join(["INFO start", "Traceback (most recent call last):", REASON, *noise]))
    lines = tail(log, 20, ["secret-value"]).splitlines()
    assert lines[:3] == ["Traceback (most recent call last):", REASON, "…"]
    assert lines[3:] == noise[-20:]


def test_the_tail_is_bounded_and_masks_secrets(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("w") as f:
        f.write("token=hf_SecretValue error: early\n")
        f.write(("x" * 1000 + "\n") * (SCAN_BYTES // 1000))  # pushes the first line out of reach
        f.write("error: token hf_SecretValue refused\n")
    found = tail(log, 20, ["hf_SecretValue"])
    assert "hf_SecretValue" not in found and "error: token *** refused" in found
    assert len(found) <= 21 * (LINE_CHARS + 40)


@pytest.mark.parametrize(
    ("value", "asked"),
    [
        ("1", True),
        ("2", True),
        (" 1 ", True),
        ("0", False),
        ("", False),
        ("true", False),
        ("-0", False),
    ],
)
def test_batch_invariance_is_recorded_where_vllm_would_read_it_on(value: str, asked: bool) -> None:
    """vllm/envs.py: bool(int(os.getenv("VLLM_BATCH_INVARIANT", "0"))); `true` fails there."""
    facts = placement_facts("gpu-01", {"VLLM_BATCH_INVARIANT": value} if value else {})
    assert facts == {"node": "gpu-01", **({"batch_invariant": True} if asked else {})}
