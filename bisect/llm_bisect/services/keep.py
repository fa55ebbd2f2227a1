"""`llm-bisect keep`: record a registry's tags in a ledger, and copy their images to a mirror.

    upstream tags ─► pattern ─► each tag's digest (a HEAD) and commit (labels, env, tag)
                                        │
                                        ▼
    ledger.json  ◄── observe: new tags added, dropped tags marked gone, never forgotten
                                        │  --mirror REGISTRY/REPO
                                        ▼
    for each tag the mirror lacks:  every blob (there already │ mounted │ streamed)
                                    → every platform's manifest, by digest
                                    → the index (or image) under its tag, same bytes

Byte for byte through the registry API: an index and its digest stay what upstream
served (GB200 nodes are arm64; a copy through the Docker engine keeps one platform
under a new digest). Idempotent: what the mirror holds is looked at (a HEAD) and never
copied again; a killed `keep` resumes where it stopped (a manifest is written only
after what it names). Meant as a daily job (configs/ci/github-actions-keep.yml).

Upstream's answers are data: a tag outside the registry's grammar (`..`, `/`, `?`, `#`,
over 128 characters) is refused, never put into a URL, and every manifest and blob is
checked against its digest before the mirror receives it (registry.py); a refusal is one
line in `failed`, and the other tags are still kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..ledger import Entry, Ledger, load, observe, save
from ..registry import (
    DIGEST,
    MAX_PAGES,
    TAG,
    Descriptor,
    ImageRef,
    Manifest,
    RawManifest,
    RegistryClient,
    RegistryError,
    node_architecture,
    shown,
    valid_tag,
)
from ..sources.images import commit_of_image, env_map

DEFAULT_PATTERN = r"nightly-[0-9a-f]{7,40}"
"""The tags `keep` records unless told: vLLM's per-commit nightlies."""


@dataclass
class Copied:
    """What copies moved (a second `keep` of the same tags moves nothing)."""

    blobs: int = 0
    """Blobs streamed from upstream to the mirror."""
    mounted: int = 0
    """Blobs the mirror linked from another of its repositories (no bytes moved)."""
    present: int = 0
    """Blobs the mirror already had."""
    manifests: int = 0
    """Manifests and indexes written to the mirror."""
    bytes: int = 0
    """Bytes of the blobs streamed."""


@dataclass
class Kept:
    """What one `keep` did."""

    ledger: Path
    matched: list[str] = field(default_factory=list)
    """Upstream tags that match the pattern, now."""
    new: list[str] = field(default_factory=list)
    """Tags first seen (or that now name another image)."""
    gone: list[str] = field(default_factory=list)
    """Tags upstream dropped since the last look."""
    mirrored: list[str] = field(default_factory=list)
    """Tags copied to the mirror by this run."""
    already: list[str] = field(default_factory=list)
    """Tags the mirror held already."""
    failed: list[str] = field(default_factory=list)
    """`tag: why` for each tag that could not be read or copied (the next run retries)."""
    copied: Copied = field(default_factory=Copied)


def keep(
    registry: RegistryClient,
    source: ImageRef,
    *,
    pattern: re.Pattern[str],
    ledger_path: Path,
    mirror: ImageRef | None,
    now: Callable[[], str],
    report: Callable[[str], None] = lambda _: None,
    max_pages: int = MAX_PAGES,
) -> Kept:
    """Look at `source`'s tags, update the ledger, copy what the mirror lacks."""
    name = f"{source.registry}/{source.repository}"
    ledger = load(ledger_path, name)
    done = Kept(ledger_path)
    listed = registry.tags(source, max_pages=max_pages)
    for tag in sorted(t for t in listed if pattern.fullmatch(t) and not valid_tag(t)):
        done.failed.append(f"{shown(tag)}: not a tag ({TAG.pattern}); not kept")
    done.matched = sorted(t for t in listed if pattern.fullmatch(t) and valid_tag(t))
    seen: dict[str, Entry] = {}
    digests: dict[str, str] = {}
    for tag in done.matched:
        # A HEAD first: a tag the ledger knows under the same digest is not downloaded
        # (Docker Hub counts a GET of a manifest as a pull, not a HEAD).
        try:
            digest = registry.manifest_digest(source, tag)
            old = ledger.entries.get(tag)
            if digest is not None and old is not None and old.digest == digest:
                seen[tag], digests[tag] = old, digest
                continue
            raw = registry.raw_manifest(source, tag)
            if raw is None:
                continue  # dropped between the list and now
            seen[tag], digests[tag] = image_entry(registry, source, tag, raw), raw.digest
        except RegistryError as exc:
            done.failed.append(f"{tag}: {exc}")
            continue
        done.new.append(tag)
    kept_gone = {t for t, e in ledger.entries.items() if e.gone}
    ledger = observe(ledger, seen, now())
    done.gone = sorted(t for t, e in ledger.entries.items() if e.gone and t not in kept_gone)
    save(ledger_path, ledger)
    if mirror is None:
        return done
    where = f"{mirror.registry}/{mirror.repository}"
    for tag, digest in digests.items():
        try:
            if registry.manifest_digest(mirror, tag, push=True) == digest:
                done.already.append(tag)
            else:
                raw = registry.raw_manifest(source, digest)
                if raw is None:
                    raise RegistryError(f"{source.repository}: {digest} is gone upstream")
                _copy(registry, source, mirror, raw, done.copied)
                registry.put_manifest(mirror, tag, raw)
                done.mirrored.append(tag)
                report(f"kept {tag} ({digest}) in {where}")
        except RegistryError as exc:
            done.failed.append(f"{tag}: {exc}")
            continue
        entries = dict(ledger.entries)
        entries[tag] = replace(entries[tag], mirror=where)
        ledger = Ledger(ledger.source, entries)
        save(ledger_path, ledger)  # each copy recorded as it is made: a kill loses none
    return done


def image_entry(registry: RegistryClient, source: ImageRef, tag: str, raw: RawManifest) -> Entry:
    """The ledger entry of a tag: its digest, platforms and the commit its image names (also
    what a day names where the registry has a tag of it: services/setup.py)."""
    image = raw
    platforms: list[str] = []
    if raw.is_index:
        children = raw.children()
        platforms = [_platform(c) for c in children if _platform(c) != "unknown/unknown"]
        arch = node_architecture()
        chosen = next(
            (c for c in children if _platform(c) == f"linux/{arch}"),
            next((c for c in children if _platform(c) != "unknown/unknown"), None),
        )
        inner = registry.raw_manifest(source, _digest(chosen, raw)) if chosen else None
        if inner is None:
            raise RegistryError(f"{source.repository}:{tag}: the index names no image")
        image = inner
    config = image.document.get("config")
    labels: dict[str, str] = {}
    env: dict[str, str] = {}
    if isinstance(config, dict) and config.get("digest"):
        manifest = Manifest(image.digest, 0, _digest(config, image), source.repository)
        inside = registry.image_config(source, manifest)
        if not platforms:
            platforms = [f"{inside.get('os', '?')}/{inside.get('architecture', '?')}"]
        body = inside.get("config")
        body = body if isinstance(body, dict) else {}
        found_labels = body.get("Labels")
        if isinstance(found_labels, dict):
            labels = {str(k): str(v) for k, v in found_labels.items()}
        listed = body.get("Env")
        env = env_map([e for e in listed if isinstance(e, str)] if isinstance(listed, list) else [])
    found = commit_of_image(tag, labels, env)
    return Entry(
        digest=raw.digest,
        commit=found[0] if found else None,
        found_in=found[1] if found else "",
        media_type=raw.media_type,
        platforms=tuple(platforms),
    )


def _digest(descriptor: Descriptor, raw: RawManifest) -> str:
    """The digest a descriptor of `raw` names (never a tag: that would be another image)."""
    digest = descriptor.get("digest")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise RegistryError(f"{raw.digest}: names {shown(str(digest))}, not a digest")
    return digest


def _platform(descriptor: Descriptor) -> str:
    p = descriptor.get("platform")
    if not isinstance(p, dict):
        return "unknown/unknown"
    variant = f"/{p['variant']}" if p.get("variant") else ""
    return f"{p.get('os', 'unknown')}/{p.get('architecture', 'unknown')}{variant}"


def _copy(
    registry: RegistryClient, source: ImageRef, mirror: ImageRef, raw: RawManifest, copied: Copied
) -> None:
    """Everything `raw` names, then `raw` itself by digest: children before their index,
    blobs before their manifest, so the mirror never holds a manifest whose parts it lacks."""
    if registry.manifest_digest(mirror, raw.digest, push=True) == raw.digest:
        return
    if raw.is_index:
        for child in raw.children():
            digest = _digest(child, raw)
            inner = registry.raw_manifest(source, digest)
            if inner is None:
                raise RegistryError(f"{source.repository}: the index names {digest}, not there")
            _copy(registry, source, mirror, inner, copied)
    else:
        for blob in raw.blobs():
            digest, size = str(blob.get("digest", "")), blob.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise RegistryError(f"{raw.digest}: blob {shown(digest)} has no size")
            if registry.has_blob(mirror, digest, push=True):
                copied.present += 1
            elif registry.mount_blob(mirror, digest, source):
                copied.mounted += 1
            else:
                registry.copy_blob(source, mirror, digest, size)
                copied.blobs += 1
                copied.bytes += size
    registry.put_manifest(mirror, raw.digest, raw)
    copied.manifests += 1
