"""plugins.py: kinds from another package, found by the `llm_bisect.kinds` entry point.

tests/toykinds is a distribution of its own (a toy launcher and a toy check, its own
pyproject.toml with the entry point); it is installed into a venv here, and llm-bisect run
from that venv lists, validates and runs its kinds with no file of llm-bisect edited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import History, write_config

ROOT = Path(__file__).resolve().parent.parent
TOYKINDS = ROOT / "tests" / "toykinds"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv over this interpreter's packages with tests/toykinds installed (offline)."""
    where = tmp_path_factory.mktemp("plugins") / "venv"
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "-q", "--system-site-packages", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run(
        [*uv, "pip", "install", "-q", "--offline", "--python", str(python), str(TOYKINDS)],
        check=True,
    )
    return python


def llm_bisect(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI of this worktree's llm-bisect, run by `python`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "bisect")}
    return subprocess.run(
        [str(python), "-m", "llm_bisect.cli", *args], capture_output=True, text=True, env=env
    )


def toy_config(tmp_path: Path, history: History) -> Path:
    return write_config(
        tmp_path / "toy.yaml",
        {
            "candidates": {
                "repo": str(history.repo),
                "good": history.shas[0],
                "bad": history.shas[-1],
            },
            "server": {"launcher": "toyserve", "repo": str(history.repo), "model": "sim/tiny"},
            "checks": [{"type": "toysum"}],
            "localize": False,
        },
    )


def test_an_installed_package_s_kinds_are_in_the_schema(venv: Path) -> None:
    schema = llm_bisect(venv, "schema")
    assert schema.returncode == 0, schema.stderr
    text = json.dumps(json.loads(schema.stdout))
    assert '"toyserve"' in text and '"toysum"' in text
    plain = llm_bisect(Path(sys.executable), "schema")  # without the package: not there
    assert plain.returncode == 0 and '"toyserve"' not in plain.stdout


def test_a_config_of_only_the_package_s_kinds_validates_and_finds_the_culprit(
    tmp_path: Path, venv: Path
) -> None:
    history = History(tmp_path, {5: "garbled-math"}, n=8)
    config = toy_config(tmp_path, history)
    out = tmp_path / "out"
    done = llm_bisect(venv, "run", str(config), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "found"
    assert result["culprit"]["commit"] == history.shas[5]
    assert {c["name"] for p in result["probes"] for c in p["checks"]} == {"toysum"}
    # without the package the same config is refused, in one line, before anything starts
    refused = llm_bisect(Path(sys.executable), "run", str(config), "--out", str(tmp_path / "o2"))
    assert refused.returncode == 2
    assert "toyserve" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "o2").exists()


def test_a_package_whose_kinds_fail_to_load_is_named_in_one_line(tmp_path: Path) -> None:
    """A broken entry point stops the CLI with one line naming it, no traceback."""
    site = tmp_path / "site"
    info = site / "broken_kinds-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-kinds\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[llm_bisect.kinds]\nbroken = broken_kinds\n")
    (site / "broken_kinds.py").write_text("raise RuntimeError('half written')\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'bisect'}{os.pathsep}{site}"}
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", "schema"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llm-bisect: error: kinds of 'broken' (broken_kinds) could not load: "
        "RuntimeError: half written"
    ]
