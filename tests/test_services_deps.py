"""`llm-bisect deps`: the first bad release of a dependency, the engine held at one build.

The engine is the simulator behind a serve script (built by a `command` strategy) that
plays the fault its installed `simdep` names; simdep's releases are real wheels on a real
PEP 503 index on 127.0.0.1, installed by real uv over the engine's build."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import (
    History,
    github_render,
    live_processes,
    printed_commands,
    run_as_printed,
)
from llm_bisect.cli import cli
from llm_bisect.fingerprint import ImageFacts
from llm_bisect.report.documents import ResultDocument
from llm_bisect.report.markdown import render_markdown
from toybuild import _page, make_wheel, serve_index

SERVE = """\
import os, sys
import simdep
if os.environ.get("SIMDEP_LOG"):  # the release each start serves, in order
    from importlib.metadata import version
    with open(os.environ["SIMDEP_LOG"], "a") as log:
        log.write(version("simdep") + "\\n")
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
        # what it downloads, said before the first probe (a PEP 503 page lists no sizes)
        said = result.output.index(f"deps: downloads from {url}/simple one file of SimDep")
        assert said < result.output.index("[1/"), result.output
        assert "sizes not listed by the index" in result.output[said:].splitlines()[0]
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


@contextmanager
def deps_index(
    tmp_path: Path, releases: Mapping[str, str], yanked: frozenset[str] = frozenset()
) -> Iterator[str]:
    """simdep's releases (version: the fault it plays) as real wheels on a PEP 503 index on
    127.0.0.1, those in `yanked` with `data-yanked`; its simple API's URL."""
    wheels, blobs, links = tmp_path / "wheels", {}, b""
    wheels.mkdir(exist_ok=True)
    for version, fault in releases.items():
        wheel = make_wheel(
            wheels, "simdep", version, {"simdep/__init__.py": f"FAULT = {fault!r}\n".encode()}
        )
        blobs[wheel.name] = wheel.read_bytes()
        page = _page(wheel.name, wheel.read_bytes())
        if version in yanked:
            page = page.replace(b"<a href", b'<a data-yanked="broken" href')
        links += page.removeprefix(b"<html><body>").removesuffix(b"</body></html>")
    with serve_index({"/simple/simdep/": links}, blobs) as (url, _):
        yield url + "/simple"


def deps_config(h: History, tmp_path: Path, *sim: str, **over: Any) -> Path:
    """A config whose engine is the simulator playing the installed simdep's fault; `sim`:
    more of the simulator's flags (lying starts)."""
    (tmp_path / "serve.py").write_text(SERVE)
    (tmp_path / "build.py").write_text(BUILD)
    return h.config(
        server={"command": [sys.executable, "{build}/serve.py", "--port", "{port}",
                            "--commit", "{commit}", *sim], "ready_timeout": 30},
        build={"strategies": [{"type": "command", "run": [
            sys.executable, str(tmp_path / "build.py"), "{out}", str(tmp_path / "serve.py")]}],
            "cache": {"dir": str(tmp_path / "cache")}},
        checks=[{"type": "canary"}, {"type": "expect"}],
        **over,
    )  # fmt: skip


def versions_of(out: Path) -> dict[str, str]:
    """The versions repository's commits: commit -> version."""
    log = subprocess.run(
        ["git", "-C", str(out / "versions.git"), "log", "--format=%H %s", "main"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {line.split()[0]: line.split()[2] for line in log.splitlines()}


SIFTED = {  # 1.2 was yanked for the very fault it plays; the index's first bad is 1.2
    "1.0": "none", "1.1rc1": "none", "1.1": "none", "1.2": "garbled-math",
    "1.3rc1": "garbled-math", "1.3": "garbled-math", "1.4": "garbled-math",
}  # fmt: skip


def test_yanked_releases_and_pre_releases_are_left_out_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A yanked release was once named first bad: pip installs none of them unasked."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    h = History(tmp_path, {}, 2)
    config = deps_config(h, tmp_path)
    with deps_index(tmp_path, SIFTED, frozenset({"1.2"})) as url:
        argv = ["deps", str(config), "--build", h.shas[-1], "--package", "simdep",
                "--good", "1.0", "--bad", "1.4", "--index", url]  # fmt: skip
        said = CliRunner().invoke(cli, [*argv, "--out", str(tmp_path / "plain")])
        assert said.exit_code == 0, said.output
        assert "first bad version: simdep 1.3" in said.output
        assert (
            "deps: 3 release(s) left out: 1 yanked (1.2), 2 pre-releases (1.1rc1, 1.3rc1); "
            "--yanked and --pre take them in"
        ) in said.output
        doc = json.loads((tmp_path / "plain" / "result.json").read_text())
        assert doc["first_bad_version"] == "1.3"
        assert doc["left_out"] == [
            {"reason": "yanked", "versions": ["1.2"]},
            {"reason": "pre-release", "versions": ["1.1rc1", "1.3rc1"]},
        ]
        assert sorted(versions_of(tmp_path / "plain").values()) == ["1.0", "1.1", "1.3", "1.4"]
        report = (tmp_path / "plain" / "report.md").read_text()
        assert "- left out, yanked: 1 release(s): `1.2` (`--yanked` takes them in)" in report
        assert "- first bad version: `1.3`" in report
        # 1.2 and 1.3rc1 lie between the answer's last good (1.1) and first bad: named, and
        # the flag that takes each in, on the terminal, in result.json and in report.md
        boundary = [
            "simdep 1.2 (yanked) lies between the answer's last good release 1.1 and its first "
            "bad 1.3, left out: the first bad may be it (--yanked takes it in).",
            "simdep 1.3rc1 (pre-release) lies between the answer's last good release 1.1 and "
            "its first bad 1.3, left out: the first bad may be it (--pre takes it in).",
        ]
        assert [n for n in doc["notes"] if "lies between" in n] == boundary
        for line in boundary:
            assert f"deps: {line}" in " ".join(said.output.split())
            assert line in report
        asked = {"yanked": (["--yanked"], "1.2"), "pre": (["--pre"], "1.3rc1"),
                 "both": (["--pre", "--yanked"], "1.2")}  # fmt: skip
        for name, (flags, first_bad) in asked.items():
            ran = CliRunner().invoke(cli, [*argv, *flags, "--out", str(tmp_path / name)])
            assert ran.exit_code == 0, ran.output
            assert f"first bad version: simdep {first_bad}" in ran.output, name
        assert "1.2 (yanked)" in subprocess.run(  # a yanked release taken in says so
            ["git", "-C", str(tmp_path / "both" / "versions.git"), "log", "--format=%s"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        # a run begun with other flags (before this change: all of them) is not resumed
        # over another list of releases: one line names the flags it was begun with
        again = CliRunner().invoke(cli, [*argv, "--out", str(tmp_path / "both")])
        assert again.exit_code == 2, again.output
        assert f"{tmp_path / 'both'}: holds a run begun with --pre --yanked" in again.output
        assert "first bad version" not in again.output
        resumed = CliRunner().invoke(cli, [*argv, "--out", str(tmp_path / "plain")])
        assert resumed.exit_code == 0 and "first bad version: simdep 1.3" in resumed.output
        doc_again = json.loads((tmp_path / "plain" / "result.json").read_text())
        assert doc_again["notes"] == doc["notes"]  # read back, not said twice
    assert live_processes(str(tmp_path)) == []


def test_an_end_that_is_a_pre_release_takes_pre_releases_in_as_pip_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    h = History(tmp_path, {}, 2)
    config = deps_config(h, tmp_path)
    out = tmp_path / "out"
    with deps_index(tmp_path, SIFTED, frozenset({"1.2"})) as url:
        said = CliRunner().invoke(cli, [
            "deps", str(config), "--build", h.shas[-1], "--package", "simdep", "--good",
            "1.0", "--bad", "1.3rc1", "--index", url, "--out", str(out)])  # fmt: skip
    assert said.exit_code == 0, said.output
    assert "first bad version: simdep 1.3rc1" in said.output
    assert "1 release(s) left out: 1 yanked (1.2); --yanked takes them in" in said.output
    assert sorted(versions_of(out).values()) == ["1.0", "1.1", "1.1rc1", "1.3rc1"]


LYING = {f"1.{i}": "none" if i < 5 else "garbled-math" for i in range(10)}  # 1.5 first bad


@pytest.mark.parametrize("lie_at", [2, 3])  # the bad end (it reads good), then 1.5 (good)
def test_a_start_that_lies_once_still_gives_the_first_bad_release_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lie_at: int
) -> None:
    """A verdict may lie (a flaky start): the search weighs it as the posterior search of
    `run` does, probes on to its confidence, and names the release whose verdict
    disagreed. Confirmation does not apply to releases, and the run says so."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("SIMDEP_LOG", str(tmp_path / "versions.log"))
    h = History(tmp_path, {}, 2)
    launches = tmp_path / "launches"
    config = deps_config(h, tmp_path, "--launch-log", str(launches), "--lie-at", str(lie_at),
                         search={"flake": "auto"})  # fmt: skip
    out = tmp_path / "out"
    with deps_index(tmp_path, LYING) as url:
        said = CliRunner().invoke(cli, [
            "deps", str(config), "--build", h.shas[-1], "--package", "simdep", "--good",
            "1.0", "--bad", "1.9", "--index", url, "--out", str(out)])  # fmt: skip
    assert said.exit_code == 0, said.output
    assert "first bad version: simdep 1.5" in said.output
    liar = (tmp_path / "versions.log").read_text().split()[lie_at - 1]  # `{commit}`: the engine
    lied = "good" if liar >= "1.5" else "bad"
    named = f"simdep {liar} tested {lied} in "
    assert f"deps: {named}" in said.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["first_bad_version"] == "1.5" and doc["search"]["posterior"] >= 0.99
    assert [d["verdict"] for d in doc["search"]["disagreed"]] == [lied]
    assert any(note.startswith(named) for note in doc["notes"])
    assert any(note.startswith("Confirmation does not apply to releases") for note in doc["notes"])
    assert "confirmation" not in doc
    assert named in (out / "report.md").read_text()
    assert live_processes(str(tmp_path)) == []


def test_a_config_with_later_builds_and_a_fast_setup_still_gives_the_first_bad_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`candidates.later` and `probe.fast` are a run's, over the engine's history: `deps` once
    resolved the later refs in its repository of versions ("no such ref") and searched in a
    fast setup built for the engine. It leaves both out, says so, and names the first bad."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    h = History(tmp_path, {}, 3)
    config = deps_config(h, tmp_path, bad=h.shas[-2], candidates={"later": [h.shas[-1]]},
                         probe={"fast": {"args": ["--max-model-len", "256"]}})  # fmt: skip
    out = tmp_path / "out"
    with deps_index(tmp_path, LYING) as url:
        said = CliRunner().invoke(cli, [
            "deps", str(config), "--build", h.shas[-2], "--package", "simdep", "--good",
            "1.0", "--bad", "1.9", "--index", url, "--out", str(out)])  # fmt: skip
    assert said.exit_code == 0, said.output
    assert "first bad version: simdep 1.5" in said.output
    text = " ".join(said.output.split())
    assert ("deps: probe.fast and candidates.later are left out: they apply to the engine's "
            "history (`run`), not to releases of a dependency") in text, text  # fmt: skip
    assert not (out / "fast").exists() and not (out / "later.json").exists()
    assert live_processes(str(tmp_path)) == []


def test_the_report_names_the_release_and_the_engine_and_its_reproduce_line_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deps' report once called a commit of the versions repository llm-bisect makes "first
    bad commit" (author llm-bisect@localhost, 1970), did not name the engine build, and its
    Reproduce lines (`check` of that commit) exited 128 (with `--repo`: 0, "expect bad"). It
    names the first bad release and the engine held; its Reproduce line, pasted into `sh` in
    another folder (with and without `--repo`), gives the same first bad release."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    h = History(tmp_path, {}, 2)
    config = deps_config(h, tmp_path)
    with deps_index(tmp_path, LYING) as url:
        for name, repo in (("out", []), ("with-repo", ["--repo", str(h.repo)])):
            out = tmp_path / name
            said = CliRunner().invoke(cli, [
                "deps", str(config), "--build", "HEAD", "--package", "simdep", "--good",
                "1.0", "--bad", "1.9", "--index", url, "--out", str(out), *repo])  # fmt: skip
            assert said.exit_code == 0, said.output
            assert (f"found: simdep 1.5 (last good 1.4), the first bad release over the engine "
                    f"at {h.shas[-1][:12]}") in said.output  # fmt: skip
            md = (out / "report.md").read_text()
            head = md.split("## ")[0]
            assert "first bad release: `simdep 1.5` (last good `1.4`)" in head, head
            assert f"the engine held at `{h.shas[-1][:12]}` (`HEAD`), built by `command`" in head
            assert "first bad commit" not in md and "llm-bisect@" not in md and "1970" not in md
            doc = json.loads((out / "result.json").read_text())
            assert doc["deps"]["engine"] == h.shas[-1] and doc["deps"]["last_good_version"] == "1.4"
            again = CliRunner().invoke(cli, ["report", str(out)])  # the same from the journal
            assert again.exit_code == 0, again.output
            assert json.loads((out / "result.json").read_text()) == doc
            assert (out / "report.md").read_text() == md
            ((line, code),) = printed_commands(md)
            assert code == 0 and ("--repo" in line) == bool(repo), line
            done = run_as_printed(line, tmp_path / "elsewhere", tmp_path / "bin")
            assert done.returncode == code, done.stdout + done.stderr
            assert "first bad version: simdep 1.5" in done.stdout
            again = json.loads((Path(f"{out}-reproduce") / "result.json").read_text())
            assert sorted(versions_of(Path(f"{out}-reproduce")).values()) == ["1.4", "1.5"]
            assert again["first_bad_version"] == "1.5"
    assert live_processes(str(tmp_path)) == []


SERVE_ANY = """\
import os, sys
try:  # a release layered by deps plays its fault; the engine's own history otherwise
    import simdep
    extra = ["--fault", simdep.FAULT]
except ImportError:
    extra = []
os.execv(sys.executable, [sys.executable, "-m", "llm_bisect.sim", *extra, *sys.argv[1:]])
"""
FLASHINFER = {"0.6.15.post1": "none", "0.6.16": "none", "0.6.16.post1": "garbled-math",
              "0.6.16.post2": "garbled-math", "0.6.16.post3": "garbled-math"}  # fmt: skip


def test_the_deps_command_a_bump_prints_runs_as_printed_on_the_runs_own_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A culprit that bumps flashinfer-python prints the `deps` command; on the run's own
    config (no build.strategies: the server command as it is, `{commit}` in it) it once
    failed ("the engine's build needs build.strategies"). Pasted into `sh` in another folder,
    with the index uv reads from the environment, it names the first bad release."""
    h = History(tmp_path, {}, 2)
    engine = json.loads((h.repo / "sim-engine.json").read_text())

    def step(message: str, pin: str, fault: str) -> str:
        (h.repo / "requirements").mkdir(exist_ok=True)
        (h.repo / "requirements" / "cuda.txt").write_text(f"flashinfer-python=={pin}\n")
        (h.repo / "sim-engine.json").write_text(json.dumps({**engine, "fault": fault}, indent=1,
                                                           sort_keys=True) + "\n")  # fmt: skip
        subprocess.run(["git", "-C", str(h.repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(h.repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        "commit", "--allow-empty", "-qm", message], check=True)  # fmt: skip
        return subprocess.run(["git", "-C", str(h.repo), "rev-parse", "HEAD"], text=True,
                              capture_output=True, check=True).stdout.strip()  # fmt: skip

    good = step("pin flashinfer", "0.6.15.post1", "none")
    culprit = step("Bump Flashinfer to 0.6.16.post3", "0.6.16.post3", "garbled-math")
    h.shas += [good, culprit, step("[Doc] later", "0.6.16.post3", "garbled-math")]
    (tmp_path / "serve_any.py").write_text(SERVE_ANY)
    command = [sys.executable, str(tmp_path / "serve_any.py"), "--repo", str(h.repo),
               "--commit", "{commit}", "--port", "{port}"]  # fmt: skip
    config = h.config(server={"command": command}, checks=[{"type": "canary"}, {"type": "expect"}],
                      confirm=False, localize={"enabled": False})  # fmt: skip
    out = tmp_path / "out"
    ran = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    assert json.loads((out / "result.json").read_text())["culprit"]["commit"] == culprit
    md = (out / "report.md").read_text()
    (line,) = [x for info, c in github_render(md).fences if info == "bash"
               for x in c.splitlines() if " deps " in x]  # fmt: skip
    wheels, blobs, links = tmp_path / "fi-wheels", {}, b""
    wheels.mkdir()
    for version, fault in FLASHINFER.items():
        files = {"simdep/__init__.py": f"FAULT = {fault!r}\n".encode()}
        wheel = make_wheel(wheels, "flashinfer_python", version, files)
        blobs[wheel.name] = wheel.read_bytes()
        page = _page(wheel.name, wheel.read_bytes())
        links += page.removeprefix(b"<html><body>").removesuffix(b"</body></html>")
    with serve_index({"/simple/flashinfer-python/": links}, blobs) as (url, _):
        monkeypatch.setenv("UV_DEFAULT_INDEX", url + "/simple")
        monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
        done = run_as_printed(line, tmp_path / "elsewhere", tmp_path / "bin")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first bad version: flashinfer-python 0.6.16.post1" in done.stdout, done.stdout
    assert (f"found: flashinfer-python 0.6.16.post1 (last good 0.6.16), the first bad release "
            f"over the engine at {good[:12]}") in done.stdout  # fmt: skip
    doc = json.loads((Path(f"{out}-deps-flashinfer-python") / "result.json").read_text())
    assert doc["deps"]["route"] == "as served" and doc["deps"]["engine"] == good
    # a run whose servers ran images prints no `deps` line (deps refuses them): it says why
    ran_doc = ResultDocument.model_validate_json((out / "result.json").read_bytes())
    imaged = [p.model_copy(update={"fingerprint": p.fingerprint.model_copy(
                  update={"image": ImageFacts(ref="vllm/vllm-openai:nightly")})})
              for p in ran_doc.probes]  # fmt: skip
    md = render_markdown(ran_doc.model_copy(update={"probes": imaged}))
    assert " deps " not in "".join(c for _, c in github_render(md).fences)
    assert "it takes a config with a process or Slurm server" in md
    assert live_processes(str(tmp_path)) == []
