"""Overlay builds: every file of the package a commit changes, the compiled-sources rule,
`base: nearest` on a release branch of cherry-picks, builds across filesystems, and route
facts computed once per range.

The toy engine here reads its fault from `toyengine/fault.json` (a file that is not
Python), so a commit that changes only that file changes what the server says.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import write_config
from llm_bisect.builds.overlay import compiled_changes, compiled_patterns
from llm_bisect.cli import cli
from toybuild import SERVE, commit, git, install, serve_index, wheel_pages

SETTINGS = (
    "import json, pathlib\n"
    'FAULT = json.loads((pathlib.Path(__file__).parent / "fault.json").read_text())["fault"]\n'
)
BASE = {
    "toyengine/__init__.py": "",
    "toyengine/settings.py": SETTINGS,
    "toyengine/serve.py": SERVE,
    "toyengine/fault.json": '{"fault": "none"}\n',
    "toyengine/templates/chat.jinja": "{{ messages }}\n",
    "toyengine/tools/run.sh": "#!/bin/sh\necho run\n",
    "toyengine/notes/a.txt": "a\n",
}
FAULTY = '{"fault": "degenerate-content"}\n'


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def rows(output: str) -> dict[str, str]:
    """`candidates` table rows by short commit."""
    return {line.split()[1]: line for line in output.splitlines() if line[:4].strip().isdigit()}


def server() -> dict[str, Any]:
    return {
        "command": ["{python}", "-m", "toyengine.serve", "--commit", "{commit}", "--port",
                    "{port}"],
        "ready_timeout": 30,
    }  # fmt: skip


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """base ─ files ─ config ─ tests-setup, and `lost` (a blob gone from the repository)
    on a branch off base; a venv holding the base commit's package."""
    root = tmp_path_factory.mktemp("engine")
    repo = root / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {"base": commit(repo, "base", BASE)}
    (repo / "toyengine/tools/run.sh").chmod(0o755)  # a mode change only
    (repo / "toyengine/notes/a.txt").rename(repo / "toyengine/notes/b.txt")
    os.symlink("fault.json", repo / "toyengine/latest.json")
    shas["files"] = commit(
        repo,
        "[Misc] files",
        {"toyengine/templates/chat.jinja": None, "toyengine/new.yaml": "x: 1\n"},
    )
    shas["config"] = commit(repo, "[Config] tune", {"toyengine/fault.json": FAULTY})
    shas["plugin"] = commit(
        repo,
        "[CI] a test plugin and an example",
        {"tests/plugins/dummy/setup.py": "setup()\n", "docs/examples/CMakeLists.txt": "x\n"},
    )
    shas["after"] = commit(repo, "[Doc] after", {"toyengine/__init__.py": "# docs\n"})
    git(repo, "checkout", "-q", "-b", "lost", shas["base"])
    shas["lost"] = commit(repo, "[Config] a blob gone", {"toyengine/gone.json": '{"gone": 1}\n'})
    blob = git(repo, "rev-parse", f"{shas['lost']}:toyengine/gone.json")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    git(repo, "checkout", "-q", "main")
    venv, site = install(root / "venv", BASE)
    return {"root": root, "repo": repo, "shas": shas, "venv": venv, "site": site}


def engine_config(engine: dict[str, Any], tmp: Path, cache: Path | None = None) -> Path:
    strategy = {"type": "overlay", "venv": str(engine["venv"]), "package": "toyengine",
                "base_commit": engine["shas"]["base"]}  # fmt: skip
    data = {
        "candidates": {"repo": str(engine["repo"]), "good": engine["shas"]["base"],
                       "bad": engine["shas"]["after"]},
        "server": server(),
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "build": {"strategies": [strategy], "cache": {"dir": str(cache or tmp / "cache")}},
    }  # fmt: skip
    return write_config(tmp / "config.yaml", data)


def probe_build(out: Path) -> dict[str, Any]:
    build: dict[str, Any] = json.loads((out / "probe.json").read_text())["fingerprint"]["build"]
    return build


def test_a_commit_that_changes_only_a_json_file_of_the_package_is_built_with_it(
    engine: dict[str, Any], tmp_path: Path
) -> None:
    shas, cfg = engine["shas"], engine_config(engine, tmp_path)
    code, output = invoke("candidates", str(cfg))
    assert code == 0, output
    # files: a mode, a rename (two paths), a link, a removal, a new file; config: the JSON
    assert "[overlay: 0 Python files and 7 other files over" in rows(output)[shas["config"][:12]]
    code, output = invoke(
        "check", str(cfg), "--candidate", shas["config"], "--out", str(tmp_path / "c")
    )
    assert code == 1, output  # the JSON says degenerate-content: its build serves that
    build = probe_build(tmp_path / "c")
    assert build["route"] == "overlay" and build["base_commit"] == shas["base"]


def test_an_overlay_writes_modes_renames_links_and_removals(
    engine: dict[str, Any], tmp_path: Path
) -> None:
    shas, cfg = engine["shas"], engine_config(engine, tmp_path)
    code, output = invoke(
        "check", str(cfg), "--candidate", shas["files"], "--out", str(tmp_path / "f")
    )
    assert code == 0, output
    build = probe_build(tmp_path / "f")
    assert (build["written"], build["removed"]) == (4, 2), build
    made = next(p for p in (tmp_path / "cache").iterdir() if p.name.startswith(shas["files"]))
    package = made / "toyengine"
    assert os.stat(package / "tools/run.sh").st_mode & stat.S_IXUSR, "the mode change"
    assert (package / "notes/b.txt").read_text() == "a\n" and not (package / "notes/a.txt").exists()
    assert not (package / "templates/chat.jinja").exists()
    assert os.readlink(package / "latest.json") == "fault.json"
    assert (package / "new.yaml").read_text() == "x: 1\n"
    # the installed package is untouched: its files were linked, never written through
    assert not os.stat(engine["site"] / "toyengine/tools/run.sh").st_mode & stat.S_IXUSR
    assert (engine["site"] / "toyengine/templates/chat.jinja").exists()


def test_the_compiled_rule_counts_only_what_the_target_builds() -> None:
    paths = [
        "setup.py",
        "CMakeLists.txt",
        "cmake/cpu_extension.cmake",
        "csrc/cpu/attention.cpp",
        "csrc/attention/paged.cu",
        "csrc/ops.h",
        "vllm/kernels/x.cuh",
        "rust/src/lib.rs",
        "requirements/cuda.txt",
        "requirements/cpu.txt",
        "requirements/common.txt",
        "requirements/test/cuda.txt",
        "tests/plugins/vllm_add_dummy_model/setup.py",
        "tests/kernels/helper.cpp",
        "docs/examples/CMakeLists.txt",
        "examples/offline/ext.cc",
        "vllm/model_executor/models/llama.py",
        "vllm/model_executor/layers/fused_moe/configs/E=8,N=14336.json",
    ]
    built = {
        "setup.py", "CMakeLists.txt", "rust/src/lib.rs", "requirements/common.txt", "csrc/ops.h",
    }  # fmt: skip
    assert set(compiled_changes(paths, compiled_patterns("any"))) == built | {
        "cmake/cpu_extension.cmake",
        "csrc/cpu/attention.cpp",
        "csrc/attention/paged.cu",
        "vllm/kernels/x.cuh",
        "requirements/cuda.txt",
        "requirements/cpu.txt",
    }
    assert set(compiled_changes(paths, compiled_patterns("cuda"))) == built | {
        "csrc/attention/paged.cu",
        "vllm/kernels/x.cuh",
        "requirements/cuda.txt",
    }
    assert set(compiled_changes(paths, compiled_patterns("cpu"))) == built | {
        "cmake/cpu_extension.cmake",
        "csrc/cpu/attention.cpp",
        "requirements/cpu.txt",
    }
    # `compiled:` is taken as written: a name without a folder is a file at the root
    assert compiled_changes(["a/setup.py", "setup.py", "x/y.cu"], ["setup.py", "*.cu"]) == [
        "setup.py",
        "x/y.cu",
    ]


def test_a_test_plugins_setup_py_does_not_block_later_commits(
    engine: dict[str, Any], tmp_path: Path
) -> None:
    shas = engine["shas"]
    code, output = invoke("candidates", str(engine_config(engine, tmp_path)))
    assert code == 0, output
    assert "[overlay: 1 Python files and 7 other files over" in rows(output)[shas["after"][:12]]


def test_a_build_across_filesystems_copies_and_a_failed_build_is_skip(
    engine: dict[str, Any], tmp_path: Path
) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    cache = shm / f"llm-bisect-test-{os.getpid()}-{tmp_path.name}"
    try:
        cfg = engine_config(engine, tmp_path, cache)
        shas = engine["shas"]
        for _ in range(2):  # made, then found again
            code, output = invoke(
                "check", str(cfg), "--candidate", shas["files"], "--out", str(tmp_path / "x")
            )
            assert code == 0, output
        made = next(p for p in cache.iterdir() if p.name.startswith(shas["files"]))
        assert (made / "toyengine" / "_native.bin").stat().st_nlink == 1, "copied, not linked"
    finally:
        subprocess.run(["rm", "-rf", str(cache)], check=True)
    # a blob the repository lost: the build fails, the probe is skip with the reason
    code, output = invoke(
        "check", str(cfg), "--candidate", shas["lost"], "--out", str(tmp_path / "l")
    )
    assert code == 125, output
    assert "Traceback" not in output and "toyengine/gone.json" in output, output


# -- a release branch of cherry-picks (the Kimi shape) -----------------------------------


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """main: base ─ m1 ─ kernel (csrc/cpu) ─ nightly, a wheel for each; the release branch
    off m1 picks r1 ─ r2 (the fault, in fault.json) ─ r3, no wheels (404)."""
    root = tmp_path_factory.mktemp("release")
    repo = root / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {"base": commit(repo, "base", BASE)}
    shas["m1"] = commit(repo, "[Doc] m1", {"toyengine/__init__.py": "# m1\n"})
    shas["kernel"] = commit(
        repo, "[Kernel] CPU attention", {"csrc/cpu/attention.cpp": "// tile 64\n",
                                          "csrc/attention/paged.cu": "// cuda\n"}
    )  # fmt: skip
    shas["nightly"] = commit(repo, "[Misc] nightly", {"toyengine/tools/run.sh": "#!/bin/sh\n"})
    git(repo, "checkout", "-q", "-b", "releases/v1", shas["m1"])
    shas["r1"] = commit(
        repo, "[Bugfix] r1 (cherry-pick)", {"toyengine/settings.py": SETTINGS + "#\n"}
    )
    shas["r2"] = commit(repo, "[Config] r2 (cherry-pick)", {"toyengine/fault.json": FAULTY})
    shas["r3"] = commit(repo, "[Doc] r3 (cherry-pick)", {"toyengine/notes/a.txt": "r3\n"})
    git(repo, "checkout", "-q", "main")
    main = {shas[k] for k in ("base", "m1", "kernel", "nightly")}
    pages, blobs = wheel_pages(repo, main, root / "wheels")
    with serve_index(pages, blobs) as (url, served):
        yield {"root": root, "repo": repo, "shas": shas, "url": url, "served": served}


def release_config(release: dict[str, Any], tmp: Path, overlay: dict[str, Any]) -> Path:
    shas = release["shas"]
    data = {
        "candidates": {"repo": str(release["repo"]), "good": shas["nightly"], "bad": shas["r3"]},
        "server": server(),
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "build": {
            "strategies": [
                {"type": "wheel", "index": release["url"] + "/{commit}/", "package": "toyengine",
                 "system_site_packages": True},
                {"type": "overlay", "package": "toyengine", **overlay},
            ],
            "cache": {"dir": str(tmp / "cache")},
        },
    }  # fmt: skip
    return write_config(tmp / "config.yaml", data)


def test_a_release_branch_of_cherry_picks_is_bisected_over_its_nearest_wheel(
    release: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    shas = release["shas"]
    # a fixed base (the nightly's install): the diff to each pick carries main's kernel
    venv, _ = install(tmp_path / "nightly-venv", BASE)
    fixed = release_config(
        release, tmp_path, {"venv": str(venv), "base_commit": shas["nightly"], "target": "cpu"}
    )
    code, output = invoke("candidates", str(fixed))
    assert code == 0, output
    assert "2 with a build route" in output, output
    assert "csrc/cpu/attention.cpp changed since" in rows(output)[shas["r2"][:12]], output
    nearest = release_config(release, tmp_path, {"base": "nearest", "target": "cpu"})
    code, output = invoke("candidates", str(nearest))
    assert code == 0, output
    table = rows(output)
    assert "[wheel: toyengine-0.1.0+g" in table[shas["nightly"][:12]], output
    assert "[wheel: toyengine-0.1.0+g" in table[shas["m1"][:12]], output
    for pick in ("r1", "r2", "r3"):
        assert f"over {shas['m1'][:12]} (nearest: wheel)" in table[shas[pick][:12]], output
    assert "5 candidates, 5 with a build route" in output, output
    out = tmp_path / "out"
    code, output = invoke("run", str(nearest), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == shas["r2"], output
    for probe in result["probes"]:
        build = probe["fingerprint"]["build"]
        if probe["commit"] in (shas["r1"], shas["r2"], shas["r3"]):
            assert build["route"] == "overlay" and build["base_commit"] == shas["m1"], build
            assert build["base_route"] == "wheel", build
        else:
            assert build["route"] == "wheel", build
    # one probe alone (no range surveyed first): the same base, found by walking back
    code, output = invoke(
        "check", str(nearest), "--candidate", shas["r3"], "--out", str(tmp_path / "one")
    )
    assert code == 1, output
    assert probe_build(tmp_path / "one")["base_commit"] == shas["m1"]


def test_nearest_without_a_strategy_before_it_is_one_line(
    release: dict[str, Any], tmp_path: Path
) -> None:
    cfg = release_config(release, tmp_path, {"base": "nearest"})
    data = json.loads(json.dumps(__import__("yaml").safe_load(cfg.read_text())))
    data["build"]["strategies"] = data["build"]["strategies"][1:]
    code, output = invoke("candidates", str(write_config(tmp_path / "bad.yaml", data)))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "build.strategies.0: base: nearest needs" in lines[0], output


# -- route facts: the same routes, computed once per range ----------------------------------

POOL = [
    "toyengine/a.py", "toyengine/b.py", "toyengine/sub/c.py", "toyengine/d.json",
    "toyengine/e.jinja", "csrc/cpu/k.cpp", "csrc/k.cu", "tests/plugins/p/setup.py",
    "docs/x.md", "CMakeLists.txt", "toyengine/sub/f.yaml",
]  # fmt: skip


def random_history(repo: Path, rng: random.Random, n: int) -> list[str]:
    """n commits of random edits, deletions, mode changes, reverts and merged side branches."""
    git(repo, "init", "-q", "-b", "main")
    made = [commit(repo, "root", {"toyengine/a.py": "0\n", "csrc/k.cu": "0\n"})]
    versions: dict[str, list[str | None]] = {}
    i = 0
    while len(made) < n:
        i += 1
        if rng.random() < 0.1 and len(made) > 3:  # a side branch, merged back
            git(repo, "checkout", "-q", "-b", f"side{i}", made[-rng.randint(1, 3)])
            side = rng.choice([f"toyengine/side/{i}.py", f"csrc/cpu/side{i}.cpp", f"docs/{i}.md"])
            commit(repo, f"side {i}", {side: f"side {i}\n"})  # a new file: no conflict
            git(repo, "checkout", "-q", "main")
            git(repo, "merge", "-q", "--no-ff", "-m", f"merge {i}", f"side{i}")
            made.append(git(repo, "rev-parse", "HEAD"))
            continue
        files: dict[str, str | None] = {}
        for path in rng.sample(POOL, rng.randint(1, 3)):
            roll = rng.random()
            if roll < 0.15 and (repo / path).exists():
                files[path] = None
            elif roll < 0.3 and versions.get(path):  # back to an older content
                files[path] = rng.choice(versions[path])
            else:
                files[path] = f"{path} {i}\n"
            versions.setdefault(path, []).append(files[path])
        files = {p: t for p, t in files.items() if t is not None or (repo / p).exists()}
        if rng.random() < 0.1 and (repo / "toyengine/a.py").exists():
            mode = (repo / "toyengine/a.py").stat().st_mode
            (repo / "toyengine/a.py").chmod(mode ^ 0o111)
        for path, text in files.items():
            if text is None:
                (repo / path).unlink()
            else:
                (repo / path).parent.mkdir(parents=True, exist_ok=True)
                (repo / path).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", f"change {i}")  # may change nothing
        made.append(git(repo, "rev-parse", "HEAD"))
    return made


def expected_route(repo: Path, base: str, commit: str, target: str) -> str:
    """The route by the old method: a diff of the base against the candidate."""
    out = git(repo, "diff", "--name-only", "--no-renames", "-z", base, commit)
    changed = [p for p in out.split("\0") if p]
    blocked = compiled_changes(changed, compiled_patterns(target))
    if blocked:
        more = f" and {len(blocked) - 1} more" if len(blocked) > 1 else ""
        return f"{blocked[0]}{more} changed since {base[:12]} (compiled sources)"
    mine = [p for p in changed if p.startswith("toyengine/")]
    python = sum(p.endswith(".py") for p in mine)
    other = f" and {len(mine) - python} other files" if len(mine) > python else ""
    return f"{python} Python files{other} over {base[:12]}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_routes_from_one_pass_equal_a_diff_per_candidate(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    repo = tmp_path / "engine"
    repo.mkdir()
    made = random_history(repo, rng, 40)
    base = made[rng.randint(0, 5)]
    venv, _ = install(tmp_path / "venv", {"toyengine/__init__.py": ""})
    for target in ("any", "cpu"):
        cfg = write_config(tmp_path / f"{target}.yaml", {
            "candidates": {"repo": str(repo), "good": made[0], "bad": made[-1]},
            "server": server(),
            "build": {"strategies": [{"type": "overlay", "venv": str(venv), "package": "toyengine",
                                      "base_commit": base, "target": target}]},
        })  # fmt: skip
        code, output = invoke("candidates", str(cfg))
        assert code == 0, output
        table = rows(output)
        listed = git(repo, "rev-list", "--topo-order", f"{made[0]}..{made[-1]}").split()
        assert len(table) == len(listed) + 1
        for sha in listed:
            want = expected_route(repo, base, sha, target)
            assert want in table[sha[:12]], (sha, want, table[sha[:12]])


def test_nearest_routes_from_one_pass_equal_a_walk_per_candidate(tmp_path: Path) -> None:
    rng = random.Random(7)
    repo = tmp_path / "engine"
    repo.mkdir()
    made = random_history(repo, rng, 40)
    listed = git(repo, "rev-list", "--topo-order", f"{made[0]}..{made[-1]}").split()
    wheels = {made[0], *rng.sample(listed, 8)}  # the good end's wheel ends every walk
    link = b'<a href="/files/toyengine-1-py3-none-any.whl">toyengine-1-py3-none-any.whl</a>'
    pages = {f"/{sha}/toyengine/": link for sha in wheels}
    with serve_index(pages, {}) as (url, _):
        cfg = write_config(tmp_path / "n.yaml", {
            "candidates": {"repo": str(repo), "good": made[0], "bad": made[-1]},
            "server": server(),
            "build": {"strategies": [
                {"type": "wheel", "index": url + "/{commit}/", "package": "toyengine"},
                {"type": "overlay", "package": "toyengine", "base": "nearest"}]},
        })  # fmt: skip
        code, output = invoke("candidates", str(cfg))
    assert code == 0, output
    table = rows(output)
    for sha in listed:
        if sha in wheels:
            assert "[wheel: toyengine-1" in table[sha[:12]]
            continue
        base = git(repo, "rev-parse", f"{sha}^")
        while base not in wheels:
            base = git(repo, "rev-parse", f"{base}^")
        want = expected_route(repo, base, sha, "any")
        want = want.replace("(compiled sources)", "(compiled sources; nearest: wheel)")
        want += "" if "compiled" in want else " (nearest: wheel)"
        assert f"overlay: {want}" in table[sha[:12]], (sha, table[sha[:12]])


def test_candidates_runs_git_a_fixed_number_of_times_whatever_the_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "engine"
    repo.mkdir()
    made = random_history(repo, random.Random(11), 120)
    venv, _ = install(tmp_path / "venv", {"toyengine/__init__.py": ""})
    cfg = write_config(tmp_path / "c.yaml", {
        "candidates": {"repo": str(repo), "good": made[0], "bad": made[-1]},
        "server": server(),
        "build": {"strategies": [{"type": "overlay", "venv": str(venv), "package": "toyengine",
                                  "base_commit": made[0]}]},
    })  # fmt: skip
    shim, calls = tmp_path / "bin", tmp_path / "git-calls"
    shim.mkdir()
    real = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    (shim / "git").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    code, output = invoke("candidates", str(cfg))
    assert code == 0, output
    assert len(rows(output)) >= 120
    ran = calls.read_text().splitlines()
    assert len(ran) < 20, "\n".join(ran)
