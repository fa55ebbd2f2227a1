"""A dependency's releases between two versions, read from a real package index served on
loopback (PEP 503 HTML, as `python -m http.server` serves a folder, and PEP 691 JSON)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from llm_bisect.errors import ConfigError
from llm_bisect.sources.picks import STAMP
from llm_bisect.sources.versions import (
    Release,
    between,
    download,
    index_releases,
    installable,
    parse_index,
    sift,
    version_at,
    version_history,
)

FILES = [  # what flashinfer's index lists around the Kimi case's bump, as wheels and sdists
    "flashinfer_python-0.6.14-py3-none-any.whl",
    "flashinfer_python-0.6.15.tar.gz",
    "flashinfer_python-0.6.15.post1-py3-none-any.whl",
    "flashinfer_python-0.6.16rc1-py3-none-any.whl",
    "flashinfer_python-0.6.16-py3-none-any.whl",
    "flashinfer_python-0.6.16.post1-py3-none-any.whl",
    "flashinfer_python-0.6.16.post3-py3-none-any.whl",
    "flashinfer_python-0.6.16.post3-cp311-cp311-manylinux_2_28_x86_64.whl",
    "flashinfer_python-0.6.17.dev0-py3-none-any.whl",
    "flashinfer_cubin-0.6.16-py3-none-any.whl",  # another project's file on the same page
    "notes.txt",
]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    page = tmp_path / "simple" / "flashinfer-python"
    page.mkdir(parents=True)
    yanked = ' data-yanked=""'
    anchors = "".join(
        f'<a href="../../files/{f}#sha256=00"{yanked if "post1" in f else ""}>{f}</a>'
        for f in FILES
    )
    (page / "index.html").write_text(f"<!DOCTYPE html><html><body>{anchors}</body></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fetch(url: str, accept: str) -> bytes:
    reply = httpx.get(url, headers={"Accept": accept})
    reply.raise_for_status()
    return reply.content


def test_the_releases_between_a_good_and_a_bad_pin_include_pre_and_post_releases(
    index: str,
) -> None:
    releases = index_releases(index, "FlashInfer_Python", fetch)
    assert [str(r) for r in between(releases, "0.6.15.post1", "0.6.16.post3")] == [
        "0.6.16rc1", "0.6.16", "0.6.16.post1", "0.6.16.post3",
    ]  # fmt: skip
    assert [str(r) for r in releases if r.yanked] == ["0.6.15.post1", "0.6.16.post1"]


def test_a_json_page_reads_the_same() -> None:
    doc = {"files": [{"filename": f, "yanked": "post1" in f} for f in FILES]}
    releases = parse_index(json.dumps(doc).encode(), "flashinfer-python")
    assert [str(r) for r in between(releases, "0.6.16", "0.6.17.dev0")] == [
        "0.6.16.post1", "0.6.16.post3", "0.6.17.dev0",
    ]  # fmt: skip


def test_what_deps_downloads_is_said_from_the_index_sizes_before_it_starts() -> None:
    """PEP 700 sizes: the file an install takes of each release, and their sum, said first
    (`deps` never asks: CI has no terminal)."""
    from llm_bisect.services.deps import downloads_said

    doc = {"files": [
        {"filename": "simdep-1.0.tar.gz", "size": 1_000},
        {"filename": "simdep-1.0-cp311-cp311-win_amd64.whl", "size": 5_000_000},
        {"filename": "simdep-1.0-py3-none-any.whl", "size": 200_000_000},
        {"filename": "simdep-1.1-py3-none-any.whl", "size": 252_000_000},
        {"filename": "simdep-1.2-py3-none-any.whl"},
    ]}  # fmt: skip
    one, two, three = parse_index(json.dumps(doc).encode(), "simdep")
    tags = frozenset({"py3-none-any"})
    assert download(one, tags) == ("simdep-1.0-py3-none-any.whl", 200_000_000)
    assert download(one, frozenset({"cp312-cp312-linux"})) == ("simdep-1.0.tar.gz", 1_000)
    said = downloads_said("simdep", [one, two], tags, "https://pypi.org/simple")
    assert said == (
        "deps: downloads from https://pypi.org/simple one file of simdep for each release it "
        "probes, at most 2 (452 MB in all: simdep-1.0-py3-none-any.whl, "
        "simdep-1.1-py3-none-any.whl), installed alone (--no-deps)"
    )
    assert "at least 452 MB (the index lists 2 of their sizes)" in downloads_said(
        "simdep", [one, two, three], tags, "x"
    )


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("0.6.15.post2", "0.6.16", r"--good: the index has no 0\.6\.15\.post2 \(latest: "),
        ("0.6.16", "0.6.15", "--good 0.6.16 is not older than --bad 0.6.15"),
        ("0.6.16", "latest", "--bad: 'latest' is not a version"),
    ],
)
def test_ends_the_index_does_not_have_are_one_line_errors(
    good: str, bad: str, message: str
) -> None:
    releases = parse_index(
        "".join(f'<a href="{f}">{f}</a>' for f in FILES).encode(), "flashinfer-python"
    )
    with pytest.raises(ConfigError, match=message):
        between(releases, good, bad)


def test_builds_for_another_platform_are_left_out_unless_an_end_is_one() -> None:
    files = [*FILES, "flashinfer_python-0.6.16+cu124-py3-none-any.whl"]
    releases = parse_index(
        "".join(f'<a href="{f}">{f}</a>' for f in files).encode(), "flashinfer-python"
    )
    assert "0.6.16+cu124" not in [str(r) for r in between(releases, "0.6.15", "0.6.16.post3")]
    assert "0.6.16+cu124" in [str(r) for r in between(releases, "0.6.15", "0.6.16+cu124")]


@pytest.mark.parametrize(
    ("page", "said"),
    [
        ('{"files": [{"filename": 5}]}', "has a filename 5"),  # was AttributeError
        ('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),  # RecursionError
        ('{"files": [["x"]]}', "is malformed (TypeError"),
        ('{"files": 5}', "is malformed (TypeError"),
    ],
)
def test_a_json_page_no_index_writes_is_one_line(page: str, said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)) as caught:
        parse_index(page.encode(), "flashinfer-python")
    assert "\n" not in str(caught.value)


def _plumbing(repo: Path, name: str, releases: list[Release], over: str) -> dict[str, str]:
    """The commits hash-object, mktree and commit-tree make, one release at a time (three
    git calls each: 24 minutes for 100k links)."""
    env = {**os.environ, **STAMP}

    def git(*args: str, data: bytes | None = None) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], input=data, env=env,
                              capture_output=True, check=True).stdout.decode().strip()  # fmt: skip

    out, parent = {}, None
    for r in releases:
        blob = git("hash-object", "-w", "--stdin", data=f"{name}=={r}\n{over}\n".encode())
        tree = git("mktree", data=f"100644 blob {blob}\tVERSION\n".encode())
        subject = f"{name} {r}" + (" (yanked)" if r.yanked else "")
        parent = git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", subject)
        out[str(r)] = parent
    return out


def test_the_versions_history_is_made_in_one_fast_import_with_the_same_commits(
    tmp_path: Path,
) -> None:
    releases = [Release(Version(v), v.endswith("post1")) for v in ("1.0", "1.0.post1", "1.1")]
    made = version_history(tmp_path / "v.git", "SimDep", releases, "engine: e")
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "p.git")], check=True)
    assert made == _plumbing(tmp_path / "p.git", "simdep", releases, "engine: e")  # resumable
    assert version_at(tmp_path / "v.git", made["1.1"]) == "1.1"
    assert version_history(tmp_path / "v.git", "SimDep", releases[:2], "engine: e") == {
        k: made[k] for k in ("1.0", "1.0.post1")
    }  # another range over the same repository: main starts anew


def test_a_release_with_wheels_for_other_platforms_only_is_not_installable() -> None:
    """364 of 1,007 releases an index listed once cost a probe each, only to say skip."""
    from llm_bisect.services.deps import wheel_tags

    supported = wheel_tags(sys.executable)
    assert supported is not None and "py3-none-any" in supported
    files = ["simdep-2.0-cp27-cp27m-win32.whl", "simdep-2.0-cp27-none-macosx_10_6_intel.whl"]
    other = Release(Version("2.0"), files=tuple(files))
    assert not installable(other, supported)
    assert installable(Release(Version("2.1"), files=("simdep-2.1-py3-none-any.whl",)), supported)
    assert installable(Release(Version("2.2"), files=(*files, "simdep-2.2.tar.gz")), supported)
    assert installable(other, None)  # the interpreter cannot say: every release is tried
    (listed,) = parse_index("".join(f'<a href="{f}">{f}</a>' for f in files).encode(), "simdep")
    assert listed.files == tuple(files)


def test_yanked_releases_and_pre_releases_are_sifted_out_unless_asked_or_an_end(
    index: str,
) -> None:
    """pip installs neither unasked; an end the user names stays, and one that is a
    pre-release takes pre-releases in (pip's rule for a specifier naming one)."""
    releases = index_releases(index, "flashinfer-python", fetch)
    ranged = between(releases, "0.6.15", "0.6.16.post3")
    plain = sift(ranged, Version("0.6.15"), pre=False, yanked=False)
    assert [str(r) for r in plain.kept] == ["0.6.16", "0.6.16.post3"]
    assert {k: [str(r) for r in v] for k, v in plain.left_out.items()} == {
        "yanked": ["0.6.15.post1", "0.6.16.post1"], "pre-release": ["0.6.16rc1"],
    }  # fmt: skip
    assert plain.said() == "2 yanked (0.6.15.post1, 0.6.16.post1), 1 pre-release (0.6.16rc1)"
    asked = sift(ranged, Version("0.6.15"), pre=True, yanked=True)
    assert asked.kept == ranged and asked.left_out == {}
    dev_end = between(releases, "0.6.15", "0.6.17.dev0")  # a dev release is a pre-release
    assert [str(r) for r in sift(dev_end, Version("0.6.15"), pre=False, yanked=False).kept] == [
        "0.6.16rc1", "0.6.16", "0.6.16.post3", "0.6.17.dev0",
    ]  # fmt: skip
    yanked_end = between(releases, "0.6.15.post1", "0.6.16.post1")
    assert [str(r) for r in sift(yanked_end, Version("0.6.15.post1"), pre=False,
                                 yanked=False).kept] == ["0.6.16", "0.6.16.post1"]  # fmt: skip
