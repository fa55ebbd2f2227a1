"""The dependency route: each release of a package, listed by a real PEP 503 index on
127.0.0.1 and made a commit of a versions repository, installed by real uv over an engine
build held still, and found first on the engine's path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from llm_bisect.builds import Build
from llm_bisect.builds.dependency import DependencyStrategy
from llm_bisect.builds.wheel import find_uv
from llm_bisect.errors import LaunchError
from llm_bisect.model import Candidate
from llm_bisect.sources.versions import (
    Release,
    between,
    index_releases,
    version_at,
    version_history,
)
from toybuild import _page, make_wheel, serve_index

VERSIONS = {
    "1.0": "none",
    "1.1rc1": "none",
    "1.1": "none",
    "1.1.post1": "garbled",
    "1.2": "garbled",
}


def fetch(url: str, accept: str) -> bytes:
    return httpx.get(url, headers={"Accept": accept}).raise_for_status().content


def test_each_release_is_a_commit_and_installs_over_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    wheels, blobs = tmp_path / "wheels", {}
    wheels.mkdir()
    links = b""
    for version, fault in VERSIONS.items():
        wheel = make_wheel(
            wheels, "simdep", version, {"simdep/__init__.py": f"FAULT = {fault!r}\n".encode()}
        )
        blobs[wheel.name] = wheel.read_bytes()
        links += (
            _page(wheel.name, blobs[wheel.name])
            .removeprefix(b"<html><body>")
            .removesuffix(b"</body></html>")
        )
    engine_dir = tmp_path / "engine"
    (engine_dir / "simdep").mkdir(parents=True)
    (engine_dir / "simdep" / "__init__.py").write_text('FAULT = "the engine build\'s own"\n')
    engine = Build(route="overlay", folder=engine_dir, python=sys.executable,
                   env={"PYTHONPATH": str(engine_dir)})  # fmt: skip
    with serve_index({"/simple/simdep/": links}, blobs) as (url, _):
        releases = index_releases(url + "/simple", "SimDep", fetch)
        assert [str(r) for r in between(releases, "1.0", "1.2")] == [
            "1.1rc1",
            "1.1",
            "1.1.post1",
            "1.2",
        ]
        repo = tmp_path / "versions.git"
        commits = version_history(repo, "simdep", releases)
        assert version_history(repo, "simdep", releases) == commits  # a resumed run: the same
        log = subprocess.run(
            ["git", "-C", str(repo), "log", "--format=%s", "main"],
            capture_output=True, text=True, check=True,
        ).stdout.split("\n")  # fmt: skip
        assert log[:2] == ["simdep 1.2", "simdep 1.1.post1"]
        strategy = DependencyStrategy(
            package="simdep", engine=lambda: engine, uv=find_uv(), index=url + "/simple",
            version_of=lambda c: version_at(repo, c.commit),
        )  # fmt: skip
        for version in ("1.1", "1.1.post1"):
            candidate = Candidate(commits[version], subject=f"simdep {version}")
            assert strategy.applies(candidate) == (
                True,
                f"simdep=={version} over the engine's build",
            )
            out = tmp_path / "builds" / version
            out.mkdir(parents=True)
            facts = strategy.make(candidate, out, tmp_path / f"{version}.log")
            build = strategy.load(candidate, out, facts)
            said = subprocess.run(
                [build.python, "-c", "import simdep, importlib.metadata as m; "
                 "print(simdep.FAULT, m.version('simdep'))"],
                env={**os.environ, **build.env}, capture_output=True, text=True, check=True,
            ).stdout.split()  # fmt: skip
            assert said == [VERSIONS[version], version]
            assert build.env["PYTHONPATH"].endswith(os.pathsep + str(engine_dir))
        other = Candidate("ab" * 20)
        assert strategy.applies(other)[0] is False
        gone = version_history(tmp_path / "gone.git", "simdep", [Release(Version("9.9"))])
        with pytest.raises(LaunchError, match=r"uv pip install simdep==9\.9 exited with"):
            strategy = DependencyStrategy(
                package="simdep", engine=lambda: engine, uv=find_uv(), index=url + "/simple",
                version_of=lambda c: version_at(tmp_path / "gone.git", c.commit),
            )  # fmt: skip
            strategy.make(Candidate(gone["9.9"]), tmp_path / "gone", tmp_path / "gone.log")
