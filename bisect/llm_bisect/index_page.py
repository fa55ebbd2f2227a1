"""A package index's project page (PEP 503 simple HTML): its file links. Pure."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from html.parser import HTMLParser


@dataclass(frozen=True)
class Link:
    """One `<a>` of a project page."""

    href: str
    filename: str
    """The last part of the link's path, unquoted (the link's text where it has none)."""
    yanked: bool = False
    """The link carries `data-yanked` (PEP 592)."""


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[Link] = []
        self._open: tuple[str, bool] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            if self._open is not None:  # the last <a> was never closed: its href counts
                self.handle_endtag("a")
            found = dict(attrs)
            self._open = (found.get("href") or "", "data-yanked" in found)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            href, yanked = self._open
            path = urllib.parse.urlsplit(href).path
            name = urllib.parse.unquote(path.rsplit("/", 1)[-1]) or "".join(self._text).strip()
            if href:
                self.found.append(Link(href, name, yanked))
            self._open = None


def links(html: str) -> list[Link]:
    """Every link of a project page with an href, in order."""
    parser = _Links()
    parser.feed(html)
    parser.close()
    if parser._open is not None:  # an <a> never closed: its href still counts
        parser.handle_endtag("a")
    return parser.found
