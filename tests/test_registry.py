"""Image references, parsed the way the Docker engine does."""

from __future__ import annotations

import pytest

from llm_bisect.registry import DOCKER_HUB, ImageRef, parse_image_ref

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("vllm/vllm-openai:v0.27.0", ImageRef(DOCKER_HUB, "vllm/vllm-openai", "v0.27.0", None)),
        ("ubuntu", ImageRef(DOCKER_HUB, "library/ubuntu", "latest", None)),
        (
            "127.0.0.1:5000/ci/vllm:nightly-ab12",
            ImageRef("127.0.0.1:5000", "ci/vllm", "nightly-ab12", None),
        ),
        (f"ghcr.io/org/img@{DIGEST}", ImageRef("ghcr.io", "org/img", None, DIGEST)),
        ("localhost/vllm", ImageRef("localhost", "vllm", "latest", None)),
    ],
)
def test_references(ref: str, parsed: ImageRef) -> None:
    assert parse_image_ref(ref) == parsed


def test_pinned_names_as_the_engine_does() -> None:
    assert parse_image_ref("vllm/vllm-openai:v1").pinned(DIGEST) == f"vllm/vllm-openai@{DIGEST}"
    assert parse_image_ref("ubuntu").pinned(DIGEST) == f"ubuntu@{DIGEST}"
    assert parse_image_ref("r.io:1/a/b:t").pinned(DIGEST) == f"r.io:1/a/b@{DIGEST}"


@pytest.mark.parametrize("bad", ["Upper/Case:x", "x@sha256:short", ""])
def test_malformed_references_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_image_ref(bad)
