"""Links a maintainer clicks: a commit, its pull request, the compare range. Pure.

Every link is made from a repository's http(s) address (`escape.safe_url`), or not at all: a
`javascript:` or `data:` address, or one holding quotes or markup, gives no link.
"""

from __future__ import annotations

import re

from ..escape import safe_url

_SCP = re.compile(r"^(?:[\w.-]+@)?(?P<host>[\w.-]+):(?P<path>[^/].*)$")
_URL = re.compile(r"^(?:https?|ssh|git)://(?:[^@/]+@)?(?P<host>[\w.-]+)(?::\d+)?/(?P<path>.+)$")
_PR = re.compile(r"\(#(\d+)\)")
FORGES = ("github", "gitlab")


def web_url(remote: str) -> str:
    """A remote's web address (`git@github.com:o/r.git` → `https://github.com/o/r`); "" for
    a remote that is not on GitHub or GitLab (a path, another host)."""
    remote = remote.strip()
    m = _URL.match(remote) or (None if "://" in remote else _SCP.match(remote))
    if m is None or not any(f in m["host"].lower() for f in FORGES):
        return ""
    path = m["path"].rstrip("/").removesuffix(".git")
    return safe_url(f"https://{m['host']}/{path}") if path.count("/") >= 1 else ""


def _gitlab(base: str) -> bool:
    return "gitlab" in base.split("/")[2].lower() if base.count("/") >= 2 else False


def _hex(ref: str) -> str:
    """A commit in a link: hex only (the core's commits are 40 hex)."""
    return ref if re.fullmatch(r"[0-9a-fA-F]{4,64}", ref) else ""


def commit_url(base: str, commit: str) -> str:
    base = safe_url(base)
    if not base or not _hex(commit):
        return ""
    return f"{base}/-/commit/{commit}" if _gitlab(base) else f"{base}/commit/{commit}"


def pr_number(subject: str) -> int | None:
    """The pull request a squash-merged subject names, `... (#12345)`: the last one."""
    found = _PR.findall(subject)
    return int(found[-1]) if found else None


def pr_url(base: str, number: int) -> str:
    base = safe_url(base)
    if not base:
        return ""
    return f"{base}/-/merge_requests/{number}" if _gitlab(base) else f"{base}/pull/{number}"


def compare_url(base: str, old: str, new: str) -> str:
    base = safe_url(base)
    if not base or not _hex(old) or not _hex(new):
        return ""
    return f"{base}/-/compare/{old}...{new}" if _gitlab(base) else f"{base}/compare/{old}...{new}"
