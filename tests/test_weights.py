"""Which weights a server loaded: its command line read, and the revision resolved in a real
hub-cache layout made in tmp_path (as huggingface_hub's snapshot_download leaves it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_bisect.weights import LOCAL, asked, hub_cache, image_argv, probe_source, resolve

MAIN = "a" * 40
TAGGED = "b" * 40
PINNED = "c" * 40


def _hub(cache: Path, model: str = "RedHatAI/Kimi-K3-NVFP4") -> Path:
    """A hub cache holding `model` at two snapshots: refs/main and refs/v1.0."""
    repo = cache / ("models--" + model.replace("/", "--"))
    for commit in (MAIN, TAGGED):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    (repo / "refs" / "v1.0").write_text(TAGGED + "\n")
    return repo


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["vllm", "serve", "org/m", "--tensor-parallel-size", "8"], {"model": "org/m"}),
        (
            ["/venv/bin/vllm", "serve", "org/m", "--revision=v1"],
            {"model": "org/m", "revision": "v1"},
        ),
        (
            ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m"],
            {"model": "org/m"},
        ),
        (
            ["vllm", "serve", "--model", "org/m", "--tokenizer", "org/t", "--download-dir", "/d"],
            {"model": "org/m", "tokenizer": "org/t", "download_dir": "/d"},
        ),
        (["python", "serve.py", "--port", "8000"], {}),
        (["vllm", "serve"], {}),
    ],
)
def test_the_command_line_names_the_model_and_revision(
    argv: list[str], want: dict[str, str]
) -> None:
    assert asked(argv) == want


def test_an_image_entrypoint_takes_the_model_by_position() -> None:
    assert asked(image_argv(None, ["org/m", "--port", "8000"])) == {"model": "org/m"}
    assert asked(image_argv(None, ["--model", "org/m"])) == {"model": "org/m"}
    assert asked(image_argv(["python3", "serve.py"], ["org/m"])) == {}


def test_the_hub_cache_is_found_as_huggingface_hub_finds_it() -> None:
    assert hub_cache({"HOME": "/h"}) == "/h/.cache/huggingface/hub"
    assert hub_cache({"HOME": "/h", "XDG_CACHE_HOME": "/x"}) == "/x/huggingface/hub"
    assert hub_cache({"HF_HOME": "/hf", "XDG_CACHE_HOME": "/x"}) == "/hf/hub"
    assert hub_cache({"HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/old"}) == "/old"
    assert hub_cache({"HF_HUB_CACHE": "/new", "HUGGINGFACE_HUB_CACHE": "/old"}) == "/new"


def test_a_hub_model_resolves_to_the_snapshot_its_ref_names(tmp_path: Path) -> None:
    _hub(tmp_path / "hub")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_TOKEN": "hf_never_read_1234"}
    model = "RedHatAI/Kimi-K3-NVFP4"
    assert resolve({"model": model}, env) == {
        "model": model,
        "revision": MAIN,
        "origin": "hub cache: refs/main",
    }
    tagged = resolve({"model": model, "revision": "v1.0"}, env)
    assert tagged["revision"] == TAGGED and tagged["origin"] == "hub cache: refs/v1.0"
    pinned = resolve({"model": model, "revision": PINNED}, env)
    assert pinned["revision"] == PINNED
    assert pinned["origin"] == f"hub cache: --revision, no snapshots/{PINNED[:12]}"
    # --download-dir is the cache vLLM hands snapshot_download
    other = tmp_path / "downloads"
    _hub(other)
    (other / "models--RedHatAI--Kimi-K3-NVFP4" / "refs" / "main").write_text(TAGGED)
    assert resolve({"model": model, "download_dir": str(other)}, env)["revision"] == TAGGED
    missing = resolve({"model": "org/absent"}, env)
    assert "revision" not in missing and missing["origin"].startswith("not in the hub cache")
    assert "hf_never_read" not in json.dumps([tagged, pinned, missing])


def test_a_tokenizer_of_its_own_is_resolved_too(tmp_path: Path) -> None:
    _hub(tmp_path, "org/tok")
    _hub(tmp_path)
    got = resolve(
        {"model": "RedHatAI/Kimi-K3-NVFP4", "tokenizer": "org/tok", "tokenizer_revision": "v1.0"},
        {"HF_HUB_CACHE": str(tmp_path)},
    )
    assert got["revision"] == MAIN
    assert (got["tokenizer"], got["tokenizer_revision"]) == ("org/tok", TAGGED)


def test_a_local_folder_is_a_snapshot_or_a_digest_of_its_files(tmp_path: Path) -> None:
    repo = _hub(tmp_path / "hub")
    snapshot = repo / "snapshots" / TAGGED
    assert resolve({"model": str(snapshot)}, {}) == {
        "model": str(snapshot),
        "revision": TAGGED,
        "origin": "snapshot folder",
    }
    link = tmp_path / "current"
    link.symlink_to(snapshot)
    assert resolve({"model": "current"}, {}, cwd=str(tmp_path))["revision"] == TAGGED

    folder = tmp_path / "kimi"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "kimi"}')
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"x" * 10)
    (folder / "README.md").write_text("notes")
    first = resolve({"model": str(folder)}, {})
    assert first["origin"] == LOCAL and len(first["revision"]) == 16
    (folder / "README.md").write_text("other notes")  # not the weights: same digest
    assert resolve({"model": str(folder)}, {}) == first
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"x" * 11)
    assert resolve({"model": str(folder)}, {})["revision"] != first["revision"]


def test_the_snippet_resolves_with_the_standard_library_where_it_runs(tmp_path: Path) -> None:
    """What a container runs: `python3 -I -c` of probe_source, in its own environment."""
    _hub(tmp_path / "hub")
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe_source({"model": "RedHatAI/Kimi-K3-NVFP4"})],
        env={"HF_HUB_CACHE": str(tmp_path / "hub")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    said = json.loads(done.stdout.splitlines()[-1])
    assert said == {
        "model": "RedHatAI/Kimi-K3-NVFP4",
        "revision": MAIN,
        "origin": "hub cache: refs/main",
    }
