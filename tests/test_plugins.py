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


def toyproc_config(tmp_path: Path, history: History) -> Path:
    """docs/plugins.md's launcher: each build's simulated server a process of its own."""
    command = [sys.executable, "-m", "llm_bisect.sim", "--port", "{port}", "--commit", "{commit}"]
    return write_config(
        tmp_path / "toyproc.yaml",
        {
            "candidates": {
                "repo": str(history.repo),
                "good": history.shas[0],
                "bad": history.shas[-1],
            },
            "server": {
                "launcher": "toyproc",
                "command": [*command, "--repo", str(history.repo)],
                "env": {"PYTHONPATH": str(ROOT / "bisect")},
                "model": "sim/tiny",
            },
            "checks": [{"type": "toysum"}],
            "localize": False,
        },
    )


def test_the_plugin_page_s_launcher_passes_every_command(tmp_path: Path, venv: Path) -> None:
    """tests/toykinds/toyproc.py, written from docs/plugins.md alone (the page holds it):
    `candidates` lists the range and its server line, `run` finds the culprit, `report DIR`
    writes the report again, `gate` blocks the bad end and allows the good one, `reap` runs."""
    history = History(tmp_path, {5: "garbled-math"}, n=8)
    config = toyproc_config(tmp_path, history)
    listed = llm_bisect(venv, "candidates", str(config))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "server: " in listed.stdout and "llm_bisect.sim --port '{port}'" in listed.stdout
    out = tmp_path / "out"
    done = llm_bisect(venv, "run", str(config), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == history.shas[5]
    (out / "report.md").unlink()
    again = llm_bisect(venv, "report", str(out))
    assert again.returncode == 0, again.stdout + again.stderr
    assert history.shas[5][:12] in (out / "report.md").read_text()
    golden = out / "golden.json"
    gate = [str(config), "--golden", str(golden), "--out"]
    blocked = llm_bisect(venv, "gate", *gate, str(tmp_path / "g1"), "--candidate", history.shas[-1])
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    allowed = llm_bisect(venv, "gate", *gate, str(tmp_path / "g2"), "--candidate", history.shas[1])
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    reaped = llm_bisect(venv, "reap", str(config))
    assert reaped.returncode == 0, reaped.stdout + reaped.stderr


def test_the_plugin_page_holds_the_toy_launcher_as_it_is() -> None:
    """docs/plugins.md's minimal launcher is tests/toykinds/toyproc.py, word for word: the page
    never drifts from a launcher that passes the commands."""
    page = (ROOT / "docs" / "plugins.md").read_text()
    code = (TOYKINDS / "toyproc.py").read_text()
    assert f"```python\n{code}```" in page


def test_a_package_whose_kind_lacks_a_fact_fails_at_load_naming_it(tmp_path: Path) -> None:
    """A launcher that declares no argv (a required fact) stops the CLI when the kinds load,
    in one line naming the fact, before any command runs (not later, in `candidates`)."""
    site = tmp_path / "site"
    info = site / "factless-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: factless\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[llm_bisect.kinds]\nfactless = factless\n")
    (site / "factless.py").write_text(
        "from typing import Literal\n"
        "from llm_bisect.config import ServerBase\n"
        "from llm_bisect.kinds import LAUNCHERS, LauncherKind\n"
        "class FactlessConfig(ServerBase):\n"
        "    launcher: Literal['factless']\n"
        "    cmd: list[str]\n"
        "LAUNCHERS.register(LauncherKind('factless', FactlessConfig, make=print,\n"
        "                                shape=frozenset({'cmd'}), argv=('command',)))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'bisect'}{os.pathsep}{site}"}
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", "candidates", "x.yaml"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llm-bisect: error: kinds of 'factless' (factless) could not load: ValueError: "
        "launcher 'factless': argv names 'command', which is no field of FactlessConfig"
    ]
