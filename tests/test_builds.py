"""Builds: overlays over a real venv, command builds, routes shown before anything runs, the cache.

A toy engine package `toyengine` is installed in a real venv (its "compiled part" a file
the server refuses to start without); a git history changes its Python, adds a compiled
source, breaks the build once and plants a fault. Each build serves the simulator with
the fault its own `toyengine/settings.py` names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import live_processes, wait_until, write_config
from llm_bisect.builds import Builder
from llm_bisect.builds.cache import BuildCache, disk_bytes
from llm_bisect.builds.command import CommandStrategy
from llm_bisect.builds.overlay import compiled_changes
from llm_bisect.builds.prefetch import BuildPrefetcher
from llm_bisect.cli import cli
from llm_bisect.errors import LaunchError
from llm_bisect.logs import run_logged
from llm_bisect.sources.git import GitSource
from toybuild import INDEX_LOGIN


def command_strategy(toy: dict[str, Any]) -> dict[str, Any]:
    """Build a commit from source with build.py (a venv, the package, its native part)."""
    return {
        "type": "command",
        "run": [sys.executable, str(toy["root"] / "build.py"), str(toy["repo"]), "{commit}",
                "{out}"],
        "timeout": 300,
    }  # fmt: skip


def wheel_strategy(index_url: str) -> dict[str, Any]:
    """toyengine wheels from the per-commit index at `index_url`/{commit}/."""
    return {"type": "wheel", "index": index_url + "/{commit}/", "package": "toyengine",
            "system_site_packages": True}  # fmt: skip


def config(toy: dict[str, Any], tmp: Path, *, command: bool = True, **over: Any) -> Path:
    strategies: list[dict[str, Any]] = [
        {"type": "overlay", "venv": str(toy["venv"]), "package": "toyengine",
         "base_commit": toy["shas"]["base"]},
    ]  # fmt: skip
    if command:
        strategies.append(command_strategy(toy))
    data: dict[str, Any] = {
        "candidates": {
            "repo": str(toy["repo"]),
            "good": toy["shas"]["base"],
            "bad": toy["shas"]["fixed"],
        },
        "server": {
            "command": ["{python}", "-m", "toyengine.serve", "--commit", "{commit}", "--port",
                        "{port}"],
            "ready_timeout": 30,
        },
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "build": {"strategies": strategies, "cache": {"dir": str(tmp / "cache")}},
        **over,
    }  # fmt: skip
    return write_config(tmp / "config.yaml", data)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_candidates_shows_each_commits_route_before_anything_runs(
    toy: dict[str, Any], tmp_path: Path
) -> None:
    code, output = invoke("candidates", str(config(toy, tmp_path)))
    assert code == 0, output
    rows = {line.split()[1]: line for line in output.splitlines() if line[:4].strip().isdigit()}
    shas = toy["shas"]
    assert "[overlay: 0 Python files over" in rows[shas["doc"][:12]]
    assert "[overlay: 1 Python files over" in rows[shas["fault"][:12]]
    assert "[command: " in rows[shas["kernel"][:12]]
    # the builds from source it will make are listed (nothing is cached yet)
    builds = next(line for line in output.splitlines() if line.startswith("builds: "))
    assert shas["kernel"][:12] in builds and shas["fault"][:12] in builds, builds
    code, output = invoke("candidates", str(config(toy, tmp_path, command=False)))
    assert code == 0, output
    kernel = next(line for line in output.splitlines() if shas["kernel"][:12] in line)
    assert "MISSING" in kernel
    assert "no build: overlay: csrc/kernel.cu changed since" in kernel
    assert "(compiled sources)" in kernel
    assert not (tmp_path / "cache").exists(), "a dry run builds nothing"


def test_a_bisection_over_overlay_and_command_builds_finds_the_culprit(
    toy: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, output = invoke("run", str(config(toy, tmp_path)), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == toy["shas"]["fault"], output
    for probe in result["probes"]:
        build = probe["fingerprint"]["build"]
        assert build["route"] in ("overlay", "command")
        if build["route"] == "overlay":
            assert build["base_commit"] == toy["shas"]["base"]
    # the overlay shares the installed package's files: only what changed is its own
    made = next(p for p in (tmp_path / "cache").iterdir() if "-overlay-" in p.name)
    assert (made / "toyengine" / "_native.bin").stat().st_nlink >= 2
    assert disk_bytes(made) < 64 * 1024


def test_no_route_and_a_failed_build_are_skip_without_a_launch(
    toy: dict[str, Any], tmp_path: Path
) -> None:
    shas = toy["shas"]
    code, output = invoke(
        "check", str(config(toy, tmp_path, command=False)), "--candidate", shas["kernel"],
        "--out", str(tmp_path / "k"),
    )  # fmt: skip
    assert code == 125, output
    assert "csrc/kernel.cu changed since" in output
    assert not (tmp_path / "k" / "probes" / shas["kernel"][:12] / "server.log").exists()
    code, output = invoke(
        "check", str(config(toy, tmp_path)), "--candidate", shas["broken"],
        "--out", str(tmp_path / "b"),
    )  # fmt: skip
    assert code == 125, output
    assert "build command exited with 1" in output
    log = tmp_path / "b" / "probes" / shas["broken"][:12] / "build.log"
    assert "the build is broken at this commit" in log.read_text()
    assert not log.with_name("server.log").exists()


def test_a_finished_build_is_reused(toy: dict[str, Any], tmp_path: Path) -> None:
    cfg = config(toy, tmp_path)
    for n in (1, 2):
        code, output = invoke(
            "check",
            str(cfg),
            "--candidate",
            toy["shas"]["refactor"],
            "--out",
            str(tmp_path / f"{n}"),
        )
        assert code == 0, output
        probe = json.loads((tmp_path / f"{n}" / "probe.json").read_text())
        assert probe["fingerprint"]["build"]["cached"] is (n == 2)


def test_the_cache_evicts_the_least_recently_used_past_its_budget(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache", budget_bytes=3 * 64 * 1024)
    for key in ("a", "b", "c", "d"):
        with cache.making(key) as (out, facts):
            (out / "blob").write_bytes(b"x" * 60 * 1024)
            facts["made"] = key
        if key == "b":
            assert cache.get("a") is not None  # used again: now newer than b
    assert sorted(cache.finished()) == ["a", "c", "d"]
    got = cache.get("d")
    assert got is not None and got[1]["made"] == "d" and got[1]["disk_bytes"] >= 60 * 1024
    # a build killed halfway left a folder without its BUILD.json: not a build, made anew
    (tmp_path / "cache" / "e" / "half").mkdir(parents=True)
    assert cache.get("e") is None
    with cache.making("e") as (out, _):
        (out / "whole").write_text("done")
    got_e = cache.get("e")
    assert got_e is not None and sorted(p.name for p in got_e[0].iterdir()) == [
        "BUILD.json",
        "whole",
    ]
    tiny = BuildCache(tmp_path / "tiny", budget_bytes=1)
    with tiny.making("only") as (out, _):
        (out / "blob").write_bytes(b"x" * 8192)
    assert list(tiny.finished()) == ["only"], "never the build just made"


def test_compiled_changes_block_an_overlay() -> None:
    patterns = ["csrc/*", "*.cu", "CMakeLists.txt", "requirements/*"]
    paths = ["vllm/a.py", "csrc/attention/x.cu", "docs/x.md", "CMakeLists.txt", "kernels/y.cu"]
    assert compiled_changes(paths, patterns) == [
        "csrc/attention/x.cu",
        "CMakeLists.txt",
        "kernels/y.cu",
    ]


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"server": {"command": ["{python}", "-m", "x", "{port}"]}, "build": None},
         "{python} and {build} need build.strategies"),
        ({"build": {"strategies": [{"type": "image"}]}}, "image builds need launcher: docker"),
        ({"build": {"strategies": [{"type": "overlay", "venv": "nowhere", "base_commit": "HEAD"}]}},
         "build.strategies.0.venv: no venv at 'nowhere'"),
        ({"build": {"strategies": [{"type": "command", "run": ["x", "{bogus}"]}]}},
         "unknown placeholder '{bogus}'"),
    ],
)  # fmt: skip
def test_a_wrong_build_config_is_one_line(
    toy: dict[str, Any], tmp_path: Path, over: dict[str, Any], message: str
) -> None:
    cfg = config(toy, tmp_path)
    data = json.loads(json.dumps(__import__("yaml").safe_load(cfg.read_text())))
    for key, value in over.items():
        if value is None:
            data.pop(key)
        elif key == "server":
            data["server"] = {**data["server"], **value}
        else:
            data[key] = value
    code, output = invoke("candidates", str(write_config(tmp_path / "bad.yaml", data)))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], output


def test_wheels_from_a_per_commit_index_are_installed_by_uv_and_bisected(
    toy: dict[str, Any], index: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    wheel = wheel_strategy(index["url"])
    cfg = config(
        toy, tmp_path, build={"strategies": [wheel], "cache": {"dir": str(tmp_path / "c")}}
    )
    code, output = invoke("candidates", str(cfg))
    assert code == 0, output
    doc = next(line for line in output.splitlines() if toy["shas"]["doc"][:12] in line)
    assert "MISSING" in doc and "no build: wheel: no wheel:" in doc and "answers 404" in doc
    assert "toyengine-0.1.0+g" in output
    out = tmp_path / "out"
    code, output = invoke("run", str(cfg), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == toy["shas"]["fault"], output
    for probe in result["probes"]:
        sha = probe["commit"]
        if sha in index["without"]:
            assert probe["verdict"] == "skip" and "no wheel" in probe["reason"]
            assert not (out / "probes" / sha[:12] / "server.log").exists()
        else:
            build = probe["fingerprint"]["build"]
            assert build["route"] == "wheel" and build["wheel"].startswith("toyengine-0.1.0+g")
            assert len(build["sha256"]) == 64
    assert any(p.startswith("/files/toyengine-") for p in index["served"]), "uv downloaded"


def test_index_credentials_reach_uv_and_no_document_log_or_command_line(
    toy: dict[str, Any], index: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, password = INDEX_LOGIN
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("TEST_INDEX_USER", user)
    monkeypatch.setenv("TEST_INDEX_PASSWORD", password)
    host = index["url"].removeprefix("http://")
    wheel = wheel_strategy(f"http://${{TEST_INDEX_USER}}:${{TEST_INDEX_PASSWORD}}@{host}/private")
    build = {"strategies": [wheel], "cache": {"dir": str(tmp_path / "c")}}
    cfg = config(toy, tmp_path, build=build)
    code, listed = invoke("candidates", str(cfg))
    assert code == 0 and "toyengine-0.1.0+g" in listed, listed  # the index read with the login
    out = tmp_path / "out"
    for name in ("fault", "doc"):  # a wheel installed by uv with the login; a commit with none
        sha = toy["shas"][name]
        code, output = invoke("check", str(cfg), "--candidate", sha, "--out", str(out))
        assert code == (1 if name == "fault" else 125), output
        assert password not in output and password not in listed
    build_log = out / "probes" / toy["shas"]["fault"][:12] / "build.log"
    assert "uv pip install" in build_log.read_text()  # its command line, as ps shows it
    probe = json.loads((out / "probe.json").read_text())
    assert "http://***@" in probe["reason"], probe["reason"]  # the doc commit's: no wheel there
    leaks = [f for f in out.rglob("*") if f.is_file() and password.encode() in f.read_bytes()]
    assert leaks == [], [(f, f.read_text()[:2000]) for f in leaks]


def test_prefetch_makes_the_next_builds_and_starts_none_while_checks_run(
    toy: dict[str, Any], tmp_path: Path
) -> None:
    starts = tmp_path / "starts.log"
    script = (
        "import pathlib, sys, time\n"
        "with open(sys.argv[1], 'a') as f: f.write(f'{time.time()} {sys.argv[2]}\\n')\n"
        "pathlib.Path(sys.argv[3], 'made').write_text(sys.argv[2])\n"
    )
    (tmp_path / "build.py").write_text(script)
    strategy = CommandStrategy(
        [sys.executable, str(tmp_path / "build.py"), str(starts), "{commit}", "{out}"],
        cwd=tmp_path,
        timeout=60,
        env=dict(os.environ),
    )
    builder = Builder([strategy], BuildCache(tmp_path / "cache", 10**9))
    source = GitSource(toy["repo"])
    first, second, third = (source.resolve(toy["shas"][k], k) for k in ("doc", "fault", "fixed"))
    prefetcher = BuildPrefetcher(builder)
    prefetcher.want([first, second])
    assert wait_until(lambda: prefetcher.made == [first.commit, second.commit], timeout=120)
    assert builder.cached(first) and builder.cached(second)
    build = builder.build(second)  # what a probe then gets: the prefetched build
    assert build.facts["cached"] is True and (build.folder / "made").read_text() == second.commit
    with prefetcher.quiet():
        prefetcher.want([third])
        released = time.time()
    assert wait_until(lambda: prefetcher.made[-1:] == [third.commit], timeout=120)
    started = {line.split()[1]: float(line.split()[0]) for line in starts.read_text().splitlines()}
    assert started[third.commit] >= released, "no build starts while checks run"
    prefetcher.close()


def test_coarse_then_fine_probes_published_wheels_first(
    toy: dict[str, Any], index: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    # only the ends and the fault kept a wheel: coarse steps narrow the range to
    # (base, fault], fine steps build the rest with the command
    wheel = wheel_strategy(index["url"] + "/sparse")
    shas = toy["shas"]
    candidates = {"repo": str(toy["repo"]), "good": shas["base"], "bad": shas["fixed"],
                  "coarse": True}  # fmt: skip
    cfg = config(
        toy,
        tmp_path,
        candidates=candidates,
        build={"strategies": [wheel, command_strategy(toy)], "cache": {"dir": str(tmp_path / "c")}},
    )
    out = tmp_path / "out"
    code, output = invoke("run", str(cfg), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == shas["fault"]
    routes = [p["fingerprint"]["build"]["route"] for p in result["probes"]]
    assert routes[:3] == ["wheel"] * 3 and "command" in routes, routes
    firsts: dict[str, str] = {}  # each commit's first probe (the posterior probes some again)
    for p, route in zip(result["probes"], routes, strict=True):
        firsts.setdefault(p["commit"], route)
    new = list(firsts.values())
    assert "wheel" not in new[new.index("command") :], "coarse steps come first"


def test_a_build_step_never_writes_a_secret_and_a_failure_keeps_its_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    secret = "hf_abcdefghijklmnop123456"
    script = "import os, sys; print('token', os.environ['HF_TOKEN']); sys.exit(3)"
    with pytest.raises(LaunchError, match="exited with 3") as caught:
        run_logged(
            [sys.executable, "-c", script],
            log,
            env={**os.environ, "HF_TOKEN": secret},
            what="build command",
            redact=["HF_TOKEN"],
        )
    text = log.read_text()
    assert "token ***" in text and secret not in text
    assert "token ***" in caught.value.log_tail


def test_a_killed_run_resumes_with_the_builds_it_finished(
    toy: dict[str, Any], tmp_path: Path
) -> None:
    hold, launches = tmp_path / "hold", tmp_path / "launches"
    hold.touch()
    (tmp_path / "engine.json").write_text(json.dumps({"hold_file": str(hold)}))
    cfg = config(toy, tmp_path)
    data = yaml.safe_load(cfg.read_text())
    data["server"]["command"] += ["--launch-log", str(launches),
                                  "--engine-file", str(tmp_path / "engine.json")]  # fmt: skip
    write_config(cfg, data)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(cfg), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # the first probe's build is made and its server started, held before it listens
        assert wait_until(lambda: launches.exists() and launches.read_text().split(), 120)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
    first = launches.read_text().split()[0]
    assert wait_until(lambda: live_processes(str(tmp_path)) == [], 15), "server left behind"
    hold.unlink()
    code, output = invoke("run", str(cfg), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == toy["shas"]["fault"]
    probe = next(p for p in result["probes"] if p["commit"] == first)
    assert probe["fingerprint"]["build"]["cached"] is True, "the build finished before the kill"
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".tmp-")]
    assert live_processes(str(tmp_path)) == []
