"""Wheel builds (builds/wheel.py): the wheel made for the node, console scripts that run
from the build, an index page read up to a cap. A real PEP 503 index on 127.0.0.1, real uv.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

import pytest

from llm_bisect.builds.wheel import Venv, WheelStrategy, find_uv
from llm_bisect.model import Candidate
from test_builds import command_strategy, config, invoke, wheel_strategy
from toybuild import make_wheel, serve_index, wheel_content


def test_a_wheel_builds_console_scripts_run_from_the_build(
    toy: dict[str, Any], index: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    server = {
        "command": ["{build}/bin/toyengine-serve", "--commit", "{commit}", "--port", "{port}"],
        "ready_timeout": 30,
    }
    build = {"strategies": [wheel_strategy(index["url"])], "cache": {"dir": str(tmp_path / "c")}}
    cfg = config(toy, tmp_path, build=build, server=server)
    out = tmp_path / "out"
    code, output = invoke(
        "check", str(cfg), "--candidate", toy["shas"]["refactor"], "--out", str(out)
    )
    assert code == 0, output
    script = next((tmp_path / "c").glob("*/bin/toyengine-serve"))
    assert str(script.parent / "python") in script.read_text(), "the script runs the build's Python"


def other_machine() -> str:
    return "aarch64" if platform.machine() != "aarch64" else "x86_64"


def test_the_wheel_route_takes_the_wheel_built_for_this_node(
    toy: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    shas = toy["shas"]
    files = tmp_path / "wheels"
    files.mkdir()
    foreign = f"py3-none-manylinux_2_17_{other_machine()}"
    pages: dict[str, bytes] = {}
    blobs: dict[str, bytes] = {}
    native = {}
    for key, tags in (("refactor", ["py3-none-any", foreign]), ("fault", [foreign])):
        links = []
        for tag in tags:  # the foreign wheel listed last
            wheel = make_wheel(
                files,
                "toyengine",
                f"0.1.0+g{shas[key][:12]}",
                wheel_content(toy, shas[key]),
                tag=tag,
            )
            blobs[wheel.name] = wheel.read_bytes()
            digest = hashlib.sha256(blobs[wheel.name]).hexdigest()
            links.append(f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
            if tag == "py3-none-any":
                native[key] = (wheel.name, digest)
        pages[f"/{shas[key]}/toyengine/"] = ("<html><body>" + "".join(links)).encode()
    with serve_index(pages, blobs) as (url, _):
        wheel = {**wheel_strategy(url), "system_site_packages": True}
        strategies = [wheel, command_strategy(toy)]
        cfg = config(
            toy, tmp_path, build={"strategies": strategies, "cache": {"dir": str(tmp_path / "c")}}
        )
        code, output = invoke("candidates", str(cfg))
        assert code == 0, output
        rows = {shas[k]: next(line for line in output.splitlines() if shas[k][:12] in line)
                for k in ("refactor", "fault")}  # fmt: skip
        assert f"[wheel: {native['refactor'][0]}]" in rows[shas["refactor"]], output
        assert "[command: " in rows[shas["fault"]], "only a foreign wheel: the next route"
        out = tmp_path / "out"
        code, output = invoke("check", str(cfg), "--candidate", shas["refactor"], "--out", str(out))
        assert code == 0, output
        made = json.loads((out / "probe.json").read_text())["fingerprint"]["build"]
        assert (made["wheel"], made["sha256"]) == native["refactor"]
        strategy = WheelStrategy(
            index=url + "/{commit}/", package="toyengine", venv=Venv(sys.executable, find_uv())
        )
        ok, why = strategy.applies(Candidate(shas["fault"]))
        assert not ok and "1 toyengine wheel, none for this Python" in why, why


@pytest.mark.parametrize("declare_length", [True, False])
def test_an_index_page_past_the_cap_is_no_wheel(tmp_path: Path, declare_length: bool) -> None:
    sha = "a" * 40
    name = "toyengine-0.1.0-py3-none-any.whl"
    padding = b"<!-- " + b"x" * (40 * 2**20) + b" -->"  # 40 MiB, past the 32 MiB cap
    page = b"<html><body>" + padding + f'<a href="/files/{name}">{name}</a>'.encode()
    with serve_index({f"/{sha}/toyengine/": page}, {}, declare_length=declare_length) as (url, _):
        strategy = WheelStrategy(
            index=url + "/{commit}/", package="toyengine", venv=Venv(sys.executable, find_uv())
        )
        ok, why = strategy.applies(Candidate(sha))
    assert not ok, why
    assert "is larger than 32 MiB" in why, why
