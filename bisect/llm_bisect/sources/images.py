"""Which commit an image was built from, read from its metadata. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

COMMIT_LABELS = ("ai.vllm.build.commit", "org.opencontainers.image.revision", "vllm.commit")
COMMIT_ENV = ("VLLM_BUILD_COMMIT", "VLLM_COMMIT", "GIT_COMMIT")
VERSION_LABELS = ("org.opencontainers.image.version", "ai.vllm.version")
VERSION_ENV = ("VLLM_VERSION",)

_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_TAG = re.compile(r"(?:^|[-_.])(?:nightly|sha|g)?-?([0-9a-f]{7,40})$")
_VERSION = re.compile(r"\+g([0-9a-f]{7,40})\b")

WHERE = (
    f"labels {', '.join(COMMIT_LABELS)}; env {', '.join(COMMIT_ENV)}; "
    "a nightly-<sha> or <sha> tag; a version with +g<sha>"
)
"""Where an image's commit is looked for, for error messages."""


def env_map(env: Sequence[str] | None) -> dict[str, str]:
    """`["A=1", "B=2"]` (an image config's Env) → `{"A": "1", "B": "2"}`."""
    return dict(e.split("=", 1) for e in (env or []) if "=" in e)


def commit_of_image(
    tag: str | None, labels: Mapping[str, str], env: Mapping[str, str]
) -> tuple[str, str] | None:
    """(commit hex, where it was found), or None when the image names no commit."""
    for key in COMMIT_LABELS:
        value = labels.get(key, "").strip().lower()
        if _HEX.match(value):
            return value, f"label {key}"
    for key in COMMIT_ENV:
        value = env.get(key, "").strip().lower()
        if _HEX.match(value):
            return value, f"env {key}"
    if tag:
        m = _TAG.search(tag.lower())
        # A bare numeric tag (20260809) is a date, not a sha.
        if m and not m.group(1).isdigit():
            return m.group(1), f"tag {tag}"
    for source, keys in ((labels, VERSION_LABELS), (env, VERSION_ENV)):
        for key in keys:
            m = _VERSION.search(source.get(key, ""))
            if m:
                return m.group(1), f"version {source[key]}"
    return None
