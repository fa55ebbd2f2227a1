"""The build cache (builds/cache.py) as slots, runs and configs share it: a build in use
is never evicted, a kill never leaves a half build that is served, two runs make one
build once and never delete each other's, a build is keyed by what made it, a corrupt
entry is made again. Real processes and threads; they wait on files, FIFOs and locks.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from helpers import wait_until
from llm_bisect.builds import Builder
from llm_bisect.builds.cache import BuildCache
from llm_bisect.builds.command import CommandStrategy
from llm_bisect.kinds import LauncherContext
from llm_bisect.launchers.process import ProcessLauncher
from llm_bisect.sources.git import GitSource
from test_builds import command_strategy, config, invoke, wheel_strategy

MAKE = "import pathlib, sys; pathlib.Path(sys.argv[1], 'made').write_text(sys.argv[2])"
"""A build command: its folder holds the commit it was made for."""


def test_a_build_a_running_probe_uses_is_never_evicted(toy: dict[str, Any], tmp_path: Path) -> None:
    strategy = CommandStrategy(
        [sys.executable, "-c", MAKE, "{out}", "{commit}"],
        cwd=tmp_path,
        timeout=60,
        env=dict(os.environ),
    )
    builder = Builder([strategy], BuildCache(tmp_path / "cache", budget_bytes=1))
    server = ["{python}", "-c", "import signal; signal.pause()", "{build}"]  # runs until stopped
    launcher = ProcessLauncher(
        server, LauncherContext(tmp_path, "t", builder=builder), cwd=tmp_path, ready_timeout=30
    )
    source = GitSource(toy["repo"])
    one, two, three = (source.resolve(toy["shas"][k], k) for k in ("doc", "refactor", "fault"))
    with launcher.launch(one, tmp_path / "p1") as running:  # slot 1's server
        folder = Path(running.argv[-1])
        assert (folder / "made").read_text() == one.commit
        builder.build(two)  # slot 2 builds past a budget that holds one build
        assert (folder / "made").exists(), "the build slot 1's server runs from was evicted"
    builder.build(three)
    assert not folder.exists(), "once its probe ended, it is the least recently used"


EVICT = """
import os, sys
from pathlib import Path
from llm_bisect.builds.cache import BuildCache
root, stalled = Path(sys.argv[1]), Path(sys.argv[2])
removed = 0
def stall(event, args):
    global removed
    if event == "os.remove" and os.path.basename(os.fsdecode(args[0])).startswith("part-"):
        removed += 1
        if removed == 2:  # one file of the build is gone, the rest is still there
            stalled.write_text("stalled")
            os.read(0, 1)  # until the test kills this process
sys.addaudithook(stall)
BuildCache(root, budget_bytes=1).evict(keep="newer")
"""


def test_a_run_killed_while_evicting_leaves_no_half_build_that_is_served(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = BuildCache(root, budget_bytes=10**9)
    with cache.making("older") as (out, _):
        for n in range(64):
            (out / f"part-{n:02}").write_text(str(n))
    with cache.making("newer") as (out, _):
        (out / "part-00").write_text("0")
    stalled = tmp_path / "stalled"
    evicting = subprocess.Popen(
        [sys.executable, "-c", EVICT, str(root), str(stalled)], stdin=subprocess.PIPE
    )
    try:
        assert wait_until(stalled.exists, 60), "the eviction never reached the build's files"
    finally:
        evicting.kill()  # SIGKILL halfway through deleting `older`
        evicting.wait()
    got = cache.get("older")
    if got is not None:
        assert len(list(got[0].glob("part-*"))) == 64, "a half-deleted build served as finished"
    assert "older" not in cache.finished()
    with cache.making("older") as (out, _):  # made again, whole
        for n in range(64):
            (out / f"part-{n:02}").write_text(str(n))
    got = cache.get("older")
    assert got is not None and len(list(got[0].glob("part-*"))) == 64
    assert len(list(root.rglob("part-*"))) == 65, "what the killed eviction left is gone"


def test_what_a_killed_build_left_goes_with_the_next_eviction_but_not_a_build_being_made(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cache"
    cache = BuildCache(root, budget_bytes=10**9)
    started, finish = threading.Event(), threading.Event()

    def make_slowly() -> None:
        with cache.making("making") as (out, _):
            (out / "part").write_text("half")
            started.set()
            finish.wait()

    maker = threading.Thread(target=make_slowly)
    maker.start()
    try:
        assert started.wait(60)
        (root / "killed" / "half").mkdir(parents=True)  # no BUILD.json, nobody making it
        with cache.making("kept") as (out, _):  # its eviction removes what is no build
            (out / "part").write_text("kept")
        assert not (root / "killed").exists()
        assert (root / "making" / "part").read_text() == "half", "a build being made was removed"
    finally:
        finish.set()
        maker.join()
    assert sorted(cache.finished()) == ["kept", "making"]


RUN = """
import os, sys
from pathlib import Path
from llm_bisect.builds import Builder
from llm_bisect.builds.cache import BuildCache
from llm_bisect.builds.command import CommandStrategy
from llm_bisect.model import Candidate
cache, script, ctl, commit = sys.argv[1:5]
strategy = CommandStrategy([sys.executable, script, "{out}", ctl], cwd=Path(ctl), timeout=120,
                           env=dict(os.environ))
build = Builder([strategy], BuildCache(Path(cache), 10**12)).build(Candidate(commit))
print("built", build.folder, (build.folder / "id").read_text(), flush=True)
sys.stdin.read()  # the build is in use until the test closes stdin
mark = build.folder / "id"
print("still", build.folder, mark.read_text() if mark.exists() else "gone", flush=True)
"""
FIRST_WAITS = """
import os, sys
from pathlib import Path
out, ctl = Path(sys.argv[1]), Path(sys.argv[2])
with open(ctl / "starts", "a") as f:
    f.write(f"{os.getpid()}\\n")
try:
    (ctl / "first").touch(exist_ok=False)
except FileExistsError:
    pass
else:
    (ctl / "go").read_text()  # a FIFO: the first build waits here until the test opens it
(out / "id").write_text(str(os.getpid()))
"""


def waits_on_a_lock(pid: int) -> bool:
    """Whether the kernel lists `pid` as blocked on a file lock (`->` in /proc/locks)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[fields.index("->") + 4 :][:1] == [str(pid)]:
            return True
    return False


def read_line(stream: IO[str], timeout: float = 120) -> list[str]:
    """The next line a child prints, split; fails instead of hanging if none comes."""
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: got.put(stream.readline()), daemon=True).start()
    return got.get(timeout=timeout).split()


def test_two_runs_sharing_a_cache_make_a_build_once_and_keep_each_others(tmp_path: Path) -> None:
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    os.mkfifo(ctl / "go")
    (tmp_path / "build.py").write_text(FIRST_WAITS)
    argv = [sys.executable, "-c", RUN, str(tmp_path / "cache"), str(tmp_path / "build.py"),
            str(ctl), "b" * 40]  # fmt: skip
    runs: list[subprocess.Popen[str]] = []
    try:
        for n in (1, 2):
            run = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            runs.append(run)
            if n == 1:  # the first run is making the build
                assert wait_until((ctl / "first").exists, 60)
        # the second run makes it too (the code before), or waits for it on the key's lock
        assert wait_until(
            lambda: len((ctl / "starts").read_text().split()) == 2 or waits_on_a_lock(runs[1].pid),
            60,
        )
        with open(ctl / "go", "w"):
            pass  # the first build finishes
        built = [read_line(r.stdout) for r in runs if r.stdout is not None]
        for r in runs:
            assert r.stdin is not None
            r.stdin.close()
        still = [read_line(r.stdout) for r in runs if r.stdout is not None]
    finally:
        for r in runs:
            r.kill()
            r.wait()
    assert len((ctl / "starts").read_text().split()) == 1, "two runs made the same build"
    assert [line[1:] for line in still] == [line[1:] for line in built], (
        "a run's build was replaced under it"
    )
    assert built[0][1:] == built[1][1:], "both runs use the one build"


def check(cfg: Path, commit: str, out: Path) -> tuple[int, str, dict[str, Any]]:
    """`check` of one commit: exit code, output, and the build facts it recorded."""
    code, output = invoke("check", str(cfg), "--candidate", commit, "--out", str(out))
    probe = out / "probe.json"
    facts = json.loads(probe.read_text())["fingerprint"].get("build", {}) if probe.exists() else {}
    return code, output, facts


def test_a_build_made_by_another_build_command_is_not_reused(
    toy: dict[str, Any], tmp_path: Path
) -> None:
    debug = command_strategy(toy)
    release = {**debug, "run": [*debug["run"], "release"]}  # this flavour shows the fault
    sha = toy["shas"]["refactor"]
    for name, strategy, verdict in (("debug", debug, 0), ("release", release, 1)):
        (tmp_path / name).mkdir()
        build = {"strategies": [strategy], "cache": {"dir": str(tmp_path / "cache")}}
        cfg = config(toy, tmp_path / name, build=build)
        code, output, facts = check(cfg, sha, tmp_path / name / "out")
        assert code == verdict, output
        assert (facts["command"][-1] == "release") is (name == "release"), facts["command"]
        assert facts["cached"] is False, f"{name}: the other config's build was reused"


def test_a_wheel_build_from_another_index_is_not_reused(
    toy: dict[str, Any], index: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    sha = toy["shas"]["fault"]
    for n, url in enumerate((index["url"], index["url"] + "/sparse")):  # e.g. cpu, then cu129
        (tmp_path / f"{n}").mkdir()
        build = {"strategies": [wheel_strategy(url)], "cache": {"dir": str(tmp_path / "cache")}}
        cfg = config(toy, tmp_path / f"{n}", build=build)
        code, output, facts = check(cfg, sha, tmp_path / f"{n}" / "out")
        assert code == 1, output
        assert facts["index"] == f"{url}/{sha}/" and facts["cached"] is False, facts


def test_a_corrupt_build_record_is_made_again(toy: dict[str, Any], tmp_path: Path) -> None:
    cfg = config(toy, tmp_path, command=False)  # overlay builds
    sha = toy["shas"]["refactor"]
    code, output, facts = check(cfg, sha, tmp_path / "first")
    assert code == 0, output
    for n, text in enumerate(["null", "[1, 2]", '"str"', "42", "", "{", '{"route": 5}']):
        marker = next((tmp_path / "cache").glob(f"{sha}*/BUILD.json"))
        if text == '{"route": 5}':
            text = json.dumps({**json.loads(marker.read_text()), "route": 5})
        marker.write_text(text)
        code, output, facts = check(cfg, sha, tmp_path / f"{n}")
        assert code == 0 and "Traceback" not in output, f"BUILD.json {text!r}: {output}"
        assert facts["route"] == "overlay" and facts["cached"] is False, (text, facts)


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_cache_dir_that_cannot_be_a_folder_is_one_line(
    toy: dict[str, Any], tmp_path: Path, where: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    cache = blocker if where == "a file" else blocker / "cache"
    build = {"strategies": [command_strategy(toy)], "cache": {"dir": str(cache)}}
    cfg = config(toy, tmp_path, build=build)
    for args, exit_code in (
        (["check", str(cfg), "--candidate", toy["shas"]["refactor"]], 128),
        (["candidates", str(cfg)], 2),
    ):
        code, output = invoke(*args)
        lines = output.strip().splitlines()
        assert code == exit_code and len(lines) == 1, output
        assert "build.cache.dir: " in lines[0] and "is not a folder" in lines[0], output


class SteppingClock:
    """A clock that moves `step` seconds each time it is read, and never waits."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now

    def time(self) -> float:
        return self.monotonic()

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_build_takes_the_time_the_cache_s_clock_says(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache", 10**9, clock=SteppingClock(2.5))
    lease, made = cache.obtain("k", {"what": "toy"}, lambda folder: {"files": 1})
    lease.release()
    assert made and lease.facts["seconds"] == pytest.approx(2.5)
