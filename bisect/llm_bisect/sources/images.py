"""Which commit an image names: read from its labels, env, tag or version (`commit_of_image`,
pure), and an end of the range given as an image resolved to that commit's candidate
(`resolve_image_end`, the image read by the launcher that runs images, without running it).

The other image modules, one job each: registry.py talks to a registry (references,
manifests, configs, tags, blobs); launchers/docker_images.py finds, pulls and prefetches
images on one Docker engine; launchers/docker_engine.py is that engine's client;
builds/images.py derives an image from a build.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ConfigError, LaunchError
from ..launchers.spread import Spread
from ..model import Candidate
from ..registry import parse_image_ref

if TYPE_CHECKING:
    from ..kinds import EndContext

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


@runtime_checkable
class ImageReader(Protocol):
    """A launcher that reads an image without running it (docker, kubernetes)."""

    def kept_ref(self, ref: str) -> str | None:
        """The kept copy of the image (a ledger's mirror, by digest), else None."""

    def image_metadata(self, ref: str) -> tuple[dict[str, str] | None, list[str]]:
        """(labels, env) of the image; (None, []) where there is no such image;
        LaunchError where it cannot tell."""


def resolve_image_end(cfg: object, ctx: EndContext, ref: str, key: str) -> Candidate:
    """The candidate an image end names (`key`: candidates.good, ...): its commit from
    labels, env, tag or version (WHERE), its artifact the image (or its kept copy)."""
    with ctx.launcher("resolve") as made:
        reader = made.launchers[0] if isinstance(made, Spread) else made
        assert isinstance(reader, ImageReader)
        kept = reader.kept_ref(ref)  # the ledger's copy: the tag may be gone upstream
        try:
            labels, env = reader.image_metadata(kept or ref)
        except LaunchError as exc:
            raise ConfigError(f"{key}: no such ref {ref!r}, and no image found: {exc}") from None
    if labels is None:
        raise ConfigError(f"{key}: no such ref or image {ref!r}")
    try:
        tag = parse_image_ref(ref).tag
    except ValueError:
        tag = None
    found = commit_of_image(tag, labels, env_map(env))
    if found is None:
        raise ConfigError(f"{key}: image {ref!r} names no commit (looked at {WHERE})")
    commit, where = found
    try:
        candidate = ctx.source.resolve(commit, key)
    except ConfigError:
        from .git import NoRepository  # here: importing sources.git registers the git kind

        if isinstance(ctx.source, NoRepository):  # a short id names a commit in a clone only
            raise ConfigError(f"{key}: image {ref!r} names commit {commit} ({where}), not a "
                              f"full id, and {ctx.source.why}") from None  # fmt: skip
        raise ConfigError(
            f"{key}: image {ref!r} is commit {commit} ({where}), not in candidates.repo"
        ) from None
    return replace(candidate, artifact=kept or ref)
