"""The keep ledger: which image each tag of a repository was, and where a copy is kept.

    {"version": 1, "source": "registry-1.docker.io/vllm/vllm-openai",
     "entries": {"nightly-<sha>": {"digest": "sha256:…", "commit": "<sha>", …,
                                   "mirror": "mirror.example/vllm/vllm-openai", "gone": null}}}

`llm-bisect keep` writes it (services/keep.py): a tag seen again keeps its first
sighting; a tag the registry dropped is marked `gone`, never forgotten. A run reads it
(the Docker launcher's `server.ledger`): a candidate whose commit it holds, copied to a
mirror, runs the mirror's image by digest — the same bytes the tag once named.
Where it lives by default: `$XDG_DATA_HOME/llm-bisect/ledgers/<registry>/<repository>.json`
(`~/.local/share/…`): not a cache, since what it records may exist nowhere else.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .files import NotReadable, read_capped, write_atomic

VERSION = 1
CAP = 64 << 20
"""Bytes a ledger may take (a repository with a million tags)."""


@dataclass(frozen=True)
class Entry:
    """One tag, as `keep` last saw it."""

    digest: str
    """What the tag named: the index's digest for a multi-arch image."""
    commit: str | None
    """The commit the image names (hex, maybe short), None when it names none."""
    found_in: str = ""
    """Where the commit was read: a label, env, the tag."""
    media_type: str = ""
    platforms: tuple[str, ...] = ()
    """`os/architecture` of each image of an index; one for a single image."""
    first_seen: str = ""
    """When `keep` first saw the tag name this digest (the ledger changes only when what
    the registry holds does: a daily job commits it only then)."""
    gone: str | None = None
    """When `keep` first found the tag dropped upstream; None while it is there."""
    mirror: str | None = None
    """`registry/repository` holding a byte-for-byte copy, by digest (and the same tag)."""


@dataclass(frozen=True)
class Ledger:
    source: str
    """`registry/repository` the tags are of."""
    entries: Mapping[str, Entry] = field(default_factory=dict)
    """Tag → entry."""

    def find(self, commit: str) -> tuple[str, Entry] | None:
        """(tag, entry) of the image of a commit (40 hex) kept on a mirror; the newest when
        several tags name it. None when the ledger has no mirrored image of it."""
        found = [
            (e.first_seen, tag, e)
            for tag, e in self.entries.items()
            if e.mirror and e.commit and len(e.commit) >= 7 and commit.startswith(e.commit)
        ]
        if not found:
            return None
        _, tag, entry = max(found)
        return tag, entry

    def nightly(self, day: str) -> tuple[str, Entry] | None:
        """(tag, entry) of the nightly of `day` (YYYY-MM-DD, UTC): a tag holding the date
        (`nightly-2026-08-09`, `20260809`), else the tag `keep` first saw that day; the newest
        sighting where several are, and only entries that name a commit. None: no such one."""
        named = [(e.first_seen, tag, e) for tag, e in self.entries.items() if e.commit]
        dated = [n for n in named if holds_day(n[1], day)]
        seen = [n for n in named if n[0][:10] == day]
        found = dated or seen
        if not found:
            return None
        _, tag, entry = max(found)
        return tag, entry


def holds_day(tag: str, day: str) -> bool:
    """Whether an image tag names `day` (YYYY-MM-DD): `nightly-2026-08-09`, `20260809`,
    `2026.08.09`."""
    return any(form in tag for form in (day, day.replace("-", ""), day.replace("-", ".")))


def observe(ledger: Ledger, seen: Mapping[str, Entry], now: str) -> Ledger:
    """The ledger after a look at the registry's tags: `seen` are those there now (their
    entries as read now). Pure.

    A tag seen again (back, if it was gone) keeps its first sighting and its mirror when it
    names the same digest
    (a tag moved to another image is a new entry, its mirror copy not yet made); a tag no
    longer there is marked gone at `now`, once.
    """
    entries = dict(ledger.entries)
    for tag, new in seen.items():
        old = entries.get(tag)
        if old is not None and old.digest == new.digest:
            entries[tag] = replace(new, first_seen=old.first_seen, gone=None, mirror=old.mirror)
        else:
            entries[tag] = replace(new, first_seen=now, gone=None, mirror=None)
    for tag, old in ledger.entries.items():
        if tag not in seen and old.gone is None:
            entries[tag] = replace(old, gone=now)
    return Ledger(ledger.source, dict(sorted(entries.items())))


def default_path(source: str, environ: Mapping[str, str] = os.environ) -> Path:
    """Where the ledger of `registry/repository` lives unless the user says (--ledger)."""
    data = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME", "~")) / ".local/share")
    return Path(data).expanduser() / "llm-bisect" / "ledgers" / f"{source}.json"


def load(path: Path, source: str | None = None, key: str = "--ledger") -> Ledger:
    """The ledger at `path`; an empty one of `source` when the file does not exist.
    ConfigError (one line) when it is not a ledger, or is another repository's."""
    try:
        raw = read_capped(path, CAP)
    except FileNotFoundError:
        if source is None:
            raise ConfigError(
                f"{key}: no such ledger '{path}' (llm-bisect keep writes it)"
            ) from None
        return Ledger(source)
    except (NotReadable, OSError) as exc:
        raise ConfigError(f"{key}: cannot read '{path}': {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} ledger")
        entries = {str(tag): _entry(value) for tag, value in (data.get("entries") or {}).items()}
        ledger = Ledger(str(data["source"]), entries)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ConfigError(f"{key}: '{path}' is not a keep ledger ({exc})") from None
    if source is not None and ledger.source != source:
        raise ConfigError(f"{key}: '{path}' is the ledger of {ledger.source}, not of {source}")
    return ledger


def _entry(value: Any) -> Entry:
    if not isinstance(value, dict):
        raise ValueError("an entry is not an object")
    digest = value.get("digest")
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"an entry's digest is {digest!r}")
    texts: dict[str, Any] = {k: value.get(k) for k in ("commit", "gone", "mirror")}
    texts |= {k: value.get(k) or "" for k in ("found_in", "media_type", "first_seen")}
    platforms = value.get("platforms") or []
    if not all(v is None or isinstance(v, str) for v in texts.values()) or not (
        isinstance(platforms, list) and all(isinstance(p, str) for p in platforms)
    ):
        raise ValueError(f"the entry of {digest} holds a value of the wrong type")
    return Entry(digest=digest, platforms=tuple(platforms), **texts)


def dumps(ledger: Ledger) -> str:
    entries = {
        tag: {**asdict(e), "platforms": list(e.platforms)} for tag, e in ledger.entries.items()
    }
    return json.dumps({"version": VERSION, "source": ledger.source, "entries": entries}, indent=1)


def save(path: Path, ledger: Ledger) -> None:
    """Write the ledger whole (a kill leaves the old one or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dumps(ledger) + "\n")
