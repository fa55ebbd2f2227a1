"""Which commit an image was built from."""

from __future__ import annotations

from llm_bisect.sources.images import commit_of_image, env_map

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
