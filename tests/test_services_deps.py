"""`llm-bisect deps`: the first bad release of a dependency, the engine held at one build.

The engine is the simulator behind a serve script (built by a `command` strategy) that
plays the fault its installed `simdep` names; simdep's releases are real wheels on a real
PEP 503 index on 127.0.0.1, installed by real uv over the engine's build."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers import History, live_processes
from llm_bisect.cli import cli
from toybuild import _page, make_wheel, serve_index

SERVE = """\
import os, sys
import simdep
print("engine: simdep", simdep.__file__, "fault", simdep.FAULT, flush=True)
os.execv(sys.executable, [sys.executable, "-m", "llm_bisect.sim", "--fault", simdep.FAULT,
                          *sys.argv[1:]])
"""
BUILD = """\
import sys
from pathlib import Path
out = Path(sys.argv[1])
(out / "serve.py").write_text(Path(sys.argv[2]).read_text())
"""
RELEASES = {  # version: the fault it plays; None: listed by the index, but will not install
    "1.0": "none", "1.0.post1": None, "1.1rc1": "none", "1.1": "none",
    "1.1.post1": "garbled-math", "1.2": "garbled-math", "1.3": "none",
}  # fmt: skip


def test_the_first_bad_release_is_named_and_one_that_will_not_install_is_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    h = History(tmp_path, {}, 2)
    (tmp_path / "serve.py").write_text(SERVE)
    (tmp_path / "build.py").write_text(BUILD)
    config = h.config(
        server={"command": [sys.executable, "{build}/serve.py", "--port", "{port}",
                            "--commit", "{commit}"], "ready_timeout": 30},
        build={"strategies": [{"type": "command", "run": [
            sys.executable, str(tmp_path / "build.py"), "{out}", str(tmp_path / "serve.py")]}],
            "cache": {"dir": str(tmp_path / "cache")}},
        checks=[{"type": "canary"}, {"type": "expect"}],
    )  # fmt: skip
    wheels, blobs, links = tmp_path / "wheels", {}, b""
    wheels.mkdir()
    for version, fault in RELEASES.items():
        files = {"simdep/__init__.py": f"FAULT = {fault!r}\n".encode()}
        wheel = make_wheel(wheels, "simdep", version, files)
        if fault is not None:
            blobs[wheel.name] = wheel.read_bytes()
        page = _page(wheel.name, wheel.read_bytes())
        links += page.removeprefix(b"<html><body>").removesuffix(b"</body></html>")
    out = tmp_path / "out"
    with serve_index({"/simple/simdep/": links}, blobs) as (url, _):
        argv = ["deps", str(config), "--build", h.shas[-1], "--package", "SimDep",
                "--good", "1.0", "--bad", "1.2", "--index", url + "/simple",
                "--out", str(out)]  # fmt: skip
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 0, result.output
        assert "first bad version: SimDep 1.1.post1" in result.output
        doc = json.loads((out / "result.json").read_text())
        assert doc["first_bad_version"] == "1.1.post1"
        assert doc["culprit"]["subject"] == "simdep 1.1.post1"
        versions = dict(
            line.split(" ", 1)[::-1]
            for line in subprocess.run(
                ["git", "-C", str(out / "versions.git"), "log", "--format=%s %H", "main"],
                capture_output=True, text=True, check=True,
            ).stdout.replace("simdep ", "").splitlines()
        )  # fmt: skip
        verdicts = {versions[p["commit"]]: p["verdict"] for p in doc["probes"]}
        assert verdicts["1.0"] == "good" and verdicts["1.2"] == "bad"  # the ends reproduce
        assert verdicts.get("1.0.post1", "skip") == "skip"  # will not install: never bad
        assert verdicts["1.1"] == "good" and verdicts["1.1.post1"] == "bad"
        assert "1.3" not in versions  # past the bad end: not in the range
        again = CliRunner().invoke(cli, argv)  # a finished run: read back, nothing probed
        assert again.exit_code == 0 and "first bad version: SimDep 1.1.post1" in again.output
        # 1.0.0 is the index's 1.0 (PEP 440): once a KeyError after the engine's build
        spelt = CliRunner().invoke(cli, [*argv[:6], "--good", "1.0.0", *argv[8:]])
        assert spelt.exit_code == 0, spelt.output
        assert "first bad version: SimDep 1.1.post1" in spelt.output
        assert "confirmation" not in doc  # a revert of a release means nothing
        other = CliRunner().invoke(cli, [*argv[:3], h.shas[-2], *argv[4:]])  # another engine
        assert other.exit_code == 2 and "first bad version" not in other.output, other.output
        assert "holds a run of another config or range" in other.output
        code = CliRunner().invoke(cli, [*argv[:6], "--good", "0.9", *argv[8:]])
        assert code.exit_code == 2 and "--good: the index has no 0.9" in code.output
    assert live_processes(str(tmp_path)) == []
