"""Which commit an image was built from, and an end of the range given as an image."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from llm_bisect import plugins
from llm_bisect.errors import ConfigError, LaunchError
from llm_bisect.kinds import LAUNCHERS, EndContext
from llm_bisect.launchers.spread import Spread
from llm_bisect.sources.git import GitSource, NoRepository
from llm_bisect.sources.images import commit_of_image, env_map, resolve_image_end

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_label_then_env_then_tag_then_version() -> None:
    assert commit_of_image("x", {"ai.vllm.build.commit": SHA}, {}) == (
        SHA,
        "label ai.vllm.build.commit",
    )
    assert commit_of_image("x", {}, {"VLLM_BUILD_COMMIT": SHA[:12]}) == (
        SHA[:12],
        "env VLLM_BUILD_COMMIT",
    )
    assert commit_of_image(f"nightly-{SHA}", {}, {})[0] == SHA  # type: ignore[index]
    assert commit_of_image(SHA, {}, {})[0] == SHA  # type: ignore[index]
    version = {"VLLM_VERSION": "0.27.0+g0123456"}
    assert commit_of_image("v0.27.0", {}, version) == ("0123456", "version 0.27.0+g0123456")


def test_no_commit_in_a_release_tag_or_a_date() -> None:
    assert commit_of_image("v0.27.0", {}, {}) is None
    assert commit_of_image("20260809", {}, {}) is None
    assert commit_of_image(None, {"ai.vllm.build.commit": "not-a-sha"}, {}) is None


def test_env_lists_become_maps() -> None:
    assert env_map(["A=1", "B=x=y", "junk"]) == {"A": "1", "B": "x=y"}


class Reader:
    """A launcher that reads images (sources.images.ImageReader): what each ref holds, and
    the ledger's kept copies."""

    def __init__(self, images: dict[str, dict[str, str]], kept: dict[str, str]) -> None:
        self.images = images
        self.kept = kept
        self.read: list[str] = []

    def kept_ref(self, ref: str) -> str | None:
        return self.kept.get(ref)

    def image_metadata(self, ref: str) -> tuple[dict[str, str] | None, list[str]]:
        self.read.append(ref)
        if ref == "registry.example/down:1":
            raise LaunchError("registry.example: 503")
        return self.images.get(ref), []


def ends(reader: Reader, source: GitSource) -> EndContext:
    @contextmanager
    def launcher(run_id: str) -> Iterator[Any]:
        yield Spread([reader, reader])  # docker_hosts: the first engine reads

    return EndContext(launcher, source)


def test_one_image_end_resolution_for_docker_and_kubernetes(history: Any) -> None:
    """Both launchers that run images resolve an end the same way (one function): the kept
    copy read and run where the ledger has one, each failure one line naming the key, and a
    short commit without a clone says why (Kubernetes said 'not in candidates.repo')."""
    plugins.load()
    assert LAUNCHERS["docker"].resolve_end is LAUNCHERS["kubernetes"].resolve_end
    assert LAUNCHERS["docker"].resolve_end is resolve_image_end
    h = history({}, n=2)
    label = "ai.vllm.build.commit"
    kept = "mirror.example/sim@sha256:" + "ab" * 32
    reader = Reader(
        {kept: {label: h.shas[1]}, "r.example/sim:short": {label: h.shas[1][:9]}},
        {"r.example/sim:gone": kept},
    )
    repo = GitSource(h.repo)
    found = resolve_image_end(None, ends(reader, repo), "r.example/sim:gone", "candidates.bad")
    assert (found.commit, found.artifact, reader.read) == (h.shas[1], kept, [kept])
    assert (
        resolve_image_end(None, ends(reader, repo), "r.example/sim:short", "k").commit
        == (h.shas[1])
    )
    cases = [
        (repo, "r.example/sim:absent", "k: no such ref or image 'r.example/sim:absent'"),
        (
            repo,
            "registry.example/down:1",
            "k: no such ref 'registry.example/down:1', and no image found: registry.example: 503",
        ),
        (
            NoRepository("the config has no candidates.repo"),
            "r.example/sim:short",
            f"k: image 'r.example/sim:short' names commit {h.shas[1][:9]} (label {label}), not a "
            "full id, and the config has no candidates.repo",
        ),
    ]
    for source, ref, message in cases:
        with pytest.raises(ConfigError) as said:
            resolve_image_end(None, ends(reader, source), ref, "k")
        assert str(said.value) == message
