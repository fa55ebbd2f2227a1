"""Links a maintainer clicks: a commit, its pull request, the compare range. Pure."""

from __future__ import annotations

import re

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
    return f"https://{m['host']}/{path}" if path.count("/") >= 1 else ""


def _gitlab(base: str) -> bool:
    return "gitlab" in base.split("/")[2].lower() if base.count("/") >= 2 else False


def commit_url(base: str, commit: str) -> str:
    if not base:
        return ""
    return f"{base}/-/commit/{commit}" if _gitlab(base) else f"{base}/commit/{commit}"


def pr_number(subject: str) -> int | None:
    """The pull request a squash-merged subject names, `... (#12345)`: the last one."""
    found = _PR.findall(subject)
    return int(found[-1]) if found else None


def pr_url(base: str, number: int) -> str:
    if not base:
        return ""
    return f"{base}/-/merge_requests/{number}" if _gitlab(base) else f"{base}/pull/{number}"


def compare_url(base: str, old: str, new: str) -> str:
    if not base:
        return ""
    return f"{base}/-/compare/{old}...{new}" if _gitlab(base) else f"{base}/compare/{old}...{new}"
