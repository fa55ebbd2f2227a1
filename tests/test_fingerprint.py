"""Kernel choices read from startup logs, in today's vLLM formats and older ones."""

from __future__ import annotations

import pytest

from llm_bisect.fingerprint import differences, flatten, parse_startup_log


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ("INFO [api_server.py:1] vLLM API server version 0.27.0", "engine_version", "0.27.0"),
        ("INFO 08-09 [__init__.py:1] vLLM version 0.6.3.post1", "engine_version", "0.6.3.post1"),
        (
            "(Worker TP0 pid=9) INFO [cuda.py:3] Using AttentionBackendEnum.FLASHINFER backend.",
            "attention_backend",
            "FLASHINFER",
        ),
        (
            "INFO [cuda.py:260] Using Flash Attention backend on V1 engine.",
            "attention_backend",
            "Flash Attention",
        ),
        ("INFO [selector.py:1] Using XFormers backend.", "attention_backend", "XFormers"),
        ("INFO [selector.py:1] Using FLASH_ATTN backend.", "attention_backend", "FLASH_ATTN"),
        (
            "INFO [fp8.py:4] Using CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod",
            "gemm_kernel",
            "CutlassFP8ScaledMMLinearKernel (Fp8LinearMethod)",
        ),
        (
            "INFO [gptq_marlin.py:2] Using MarlinLinearKernel for GPTQMarlinLinearMethod",
            "gemm_kernel",
            "MarlinLinearKernel (GPTQMarlinLinearMethod)",
        ),
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
            "INFO [gpu_model_runner.py:3] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)",
            "cudagraph_mode",
            "mixed prefill-decode, PIECEWISE",
        ),
        (
            "INFO [model_runner.py:1] Capturing cudagraphs for decoding. This may lead to ...",
            "cudagraph_mode",
            "Capturing cudagraphs for decoding",
        ),
        (
            "INFO [arg_utils.py:1] non-default args: {'enforce_eager': True}",
            "cudagraph_mode",
            "NONE (enforce_eager)",
        ),
    ],
)
def test_each_format_is_read(line: str, key: str, value: str) -> None:
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


def test_differences_mark_a_flashinfer_bump() -> None:
    old = {
        "packages": {"flashinfer": "0.5.2", "torch": "2.9.0"},
        "kernels": {"moe_backend": "CUTLASS"},
    }
    new = {
        "packages": {"flashinfer": "0.5.3", "torch": "2.9.0"},
        "kernels": {"moe_backend": "CUTLASS"},
    }
    assert differences(old, new) == ["packages.flashinfer"]
    assert flatten(old)["kernels.moe_backend"] == "CUTLASS"
