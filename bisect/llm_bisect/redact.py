"""What may be written: secrets masked, long texts cut. Pure.

Everything llm-bisect writes or prints (journal, result.json, report.md,
golden.json, the terminal) passes through one `Scrub` at its write boundary,
so a server that echoes `HF_TOKEN` into a reply or a 500 body, or answers
with megabytes of text, cannot put either into a file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, AnyStr
from urllib.parse import unquote, urlsplit, urlunsplit

MASK = "***"
MIN_SECRET = 4
"""Shorter values are not masked: masking `1` or `no` would garble every text."""
MAX_TEXT = 20_000
"""Characters of one text kept in a document; longer ones keep their head, length and hash."""
HOLD_MAX = 1 << 20
"""Bytes a Masker holds back at most (overlapping secrets repeated without end)."""


def _spans(text: AnyStr, secrets: Iterable[AnyStr]) -> list[tuple[int, int]]:
    """Where secrets occur, overlapping occurrences merged into one span, in order."""
    found = []
    for secret in secrets:
        at = text.find(secret)
        while at >= 0:
            found.append((at, at + len(secret)))
            at = text.find(secret, at + 1)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _masked(text: AnyStr, spans: list[tuple[int, int]], mask: AnyStr) -> AnyStr:
    parts, at = [], 0
    for start, end in spans:
        parts += [text[at:start], mask]
        at = end
    parts.append(text[at:])
    return text[:0].join(parts)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value (4+ characters) in a text by ***; secrets that overlap
    there are one *** (no piece of either shows)."""
    kept = [s for s in secrets if len(s) >= MIN_SECRET]
    return _masked(text, _spans(text, kept), MASK) if kept else text


class Masker:
    """`redact` over a byte stream cut anywhere (a Docker log arrives in 16 KiB pieces):
    what `feed` returns, joined, is the whole stream redacted, whatever the cuts.

        fed so far  ───────────────────────┬──────────────┐
        given out   masked, final          │ held back    │  a secret may begin here
                                        cut                (the longest secret - 1 bytes,
                                                            or a secret running past it)
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = [s.encode() for s in secrets if len(s) >= MIN_SECRET]
        self.longest = max((len(s) for s in self.secrets), default=0)
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """What of the stream so far is final, masked."""
        if not self.secrets:
            return chunk
        text = self._held + chunk
        spans = _spans(text, self.secrets)
        # A secret starting before `cut` fits whole in `text`: the spans before it are final.
        cut = max(0, len(text) - self.longest + 1)
        for start, end in spans:
            if start < cut < end:
                cut = start if len(text) - start <= HOLD_MAX else end
        self._held = text[cut:]
        return _masked(text[:cut], [s for s in spans if s[1] <= cut], MASK.encode())

    def flush(self) -> bytes:
        """The rest, masked (the stream ended)."""
        text, self._held = self._held, b""
        return _masked(text, _spans(text, self.secrets), MASK.encode())


def url_logins(url: str) -> list[tuple[str, str]]:
    """The secrets a URL carries in its `user:password@` part (as written and decoded),
    each with what it is: the pair (`LOGIN`) and the password (`PASSWORD`), or a user alone
    (a token: `LOGIN`). Pure."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return []
    if not user and not password:
        return []
    userinfo = parts.netloc.rpartition("@")[0]
    found = [(userinfo, "LOGIN"), (unquote(userinfo), "LOGIN")]
    if password:
        found += [(password, "PASSWORD"), (unquote(password), "PASSWORD")]
    else:
        found += [(user or "", "LOGIN"), (unquote(user or ""), "LOGIN")]
    return list(dict.fromkeys((s, k) for s, k in found if s))


def url_credentials(url: str) -> list[str]:
    """The secrets a URL carries in its `user:password@` part (url_logins). Pure."""
    return list(dict.fromkeys(s for s, _ in url_logins(url)))


def public_url(url: str) -> str:
    """The URL with its `user:password@` part shown as `***@`, to be written anywhere. Pure."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{MASK}@{host}"))


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """The text, or its first `limit` characters with its whole length and a hash."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[:limit]}… [cut: {len(text)} characters in all, sha256 {digest}]"


def _in_quotes(secret: str) -> str:
    """A secret as it stands inside a word shlex.quote put in single quotes."""
    return secret.replace("'", "'\"'\"'")


def _quoting(line: str, start: int, end: int, state: str) -> str:
    """The quote `sh` is inside at `end` ("'", '"' or ""), reading from `start` in `state`."""
    i = start
    while i < end:
        c = line[i]
        if state == "'":
            state = "" if c == "'" else state
        elif state == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                state = ""
        elif c in "'\"":
            state = c
        elif c == "\\":
            i += 1
        i += 1
    return state


@dataclass(frozen=True)
class Scrub:
    """The secrets of one run, and how to keep them (and oversized texts) out of output."""

    secrets: tuple[str, ...] = ()
    max_text: int = MAX_TEXT
    names: tuple[tuple[str, str], ...] = ()
    """(secret, variable): a command line written takes that secret from `"$variable"`."""

    def with_secrets(self, more: Iterable[str], names: Mapping[str, str] | None = None) -> Scrub:
        """Also these secrets (and each as it stands in a single-quoted shell word, as
        shlex.join writes a `'` in it), `names` giving a secret's variable."""
        given = {s for s in more if len(s) >= MIN_SECRET}
        quoted = {_in_quotes(s): s for s in given if "'" in s}
        found = {*self.secrets, *given, *quoted}
        named = {**dict(self.names), **{k: v for k, v in (names or {}).items() if k in found}}
        named |= {q: named[s] for q, s in quoted.items() if s in named}
        return Scrub(tuple(sorted(found, key=len, reverse=True)), self.max_text,
                     tuple(sorted(named.items())))  # fmt: skip

    def text(self, text: str) -> str:
        """A text with every secret masked (not cut: terminal lines and logs stay whole)."""
        return redact(text, self.secrets) if self.secrets else text

    def shell(self, line: str) -> str:
        """A command line (as shlex.join writes it) with each secret that has a variable
        replaced by `"$variable"` (closing and reopening a single-quoted word around it),
        so that `sh` runs it with the reader's own value; any other secret is ***."""
        named = dict(self.names)
        spans = _spans(line, [s for s in self.secrets if s in named])
        if not spans:
            return self.text(line)
        parts, at, state = [], 0, ""
        for start, end in spans:
            state = _quoting(line, at, start, state)
            name = named.get(line[start:end])
            var = f'"${name}"' if name else "'***'"
            parts += [line[at:start], f"'{var}'" if state == "'" else var]
            at = end
        parts.append(line[at:])
        return self.text("".join(parts))

    def doc(self, value: Any) -> Any:
        """A JSON value with every string (keys too) masked and cut to `max_text`; a string
        under `command` is a command line (`shell`)."""
        if isinstance(value, str):
            return clip(self.text(value), self.max_text)
        if isinstance(value, dict):
            return {
                self.doc(str(k)): clip(self.shell(v), self.max_text)
                if k == "command" and isinstance(v, str)
                else self.doc(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.doc(v) for v in value]
        return value
