"""What reproduces a run away from this machine, for report.md to hold (a GitHub issue
stands alone): the names its files take when attached, the `check` lines that use those
names, the first bad build's `docker run` by its image digest and a `curl` of the canary's
first failing prompt. Pure: values in, argv and text out (escape.shell quotes them).

    this machine                         the issue
    /abs/run/config.yaml            →    config.yaml   (embedded in report.md, secrets masked)
    /abs/out/golden.json            →    golden.json   (attached)
    --repo /abs/vllm                →    --repo vllm   (a clone of the repository's address)
    docker run ... image:tag        →    docker run ... image@sha256:...
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from ..checks.canary import CanaryCase, CanaryDetails
from ..escape import safe_url
from ..fingerprint import Fingerprint
from ..model import GREEDY
from ..secretnames import API_KEY_ENV, flag_value
from .documents import Context, ProbeDoc

CONFIG = "config.yaml"
"""The config's name in the issue: saved from report.md's folded block."""
GOLDEN = "golden.json"
"""The golden's name in the issue: the file attached."""
_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_UNSEEN = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufffe\uffff\ud800-\udfff]")
"""What JSON leaves as it is but a fenced block in report.md would leave out (escape.plain):
written as \\uXXXX instead, so the line holds the prompt exactly."""


def clone_folder(ctx: Context) -> str:
    """The folder a reader clones the repository into: its address's last part (`vllm`),
    else `repo`."""
    url = safe_url(ctx.repo_url)
    last = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") if url else ""
    return last if _FOLDER.fullmatch(last) and last not in (".", "..") else "repo"


def clone_argv(ctx: Context) -> list[str] | None:
    """`git clone URL FOLDER`, where the repository's web address is known."""
    url = safe_url(ctx.repo_url)
    return ["git", "clone", url, clone_folder(ctx)] if url else None


def check_argv(ctx: Context, commit: str) -> list[str]:
    """`llm-bisect check` of one commit by the attachments' names, not this machine's paths."""
    golden = ["--golden", GOLDEN] if ctx.golden else []
    return ["llm-bisect", "check", CONFIG, "--candidate", commit, *golden,
            "--repo", clone_folder(ctx)]  # fmt: skip


@dataclass(frozen=True)
class Pinned:
    """A `docker run` line with the image named by what cannot move."""

    line: str
    name: str
    """What the line names the image by: `repo@sha256:...` or the image id."""
    by_id: bool
    """True: no registry digest (built or tagged here, never pulled or pushed): the image id,
    which names it on this Docker engine only."""


def pinned_name(ref: str, digest: str) -> str:
    """The image by its digest: `repo@sha256:...` as Docker records it, or a bare digest on
    the repository of `ref` (its tag or digest dropped)."""
    if "@" in digest:
        return digest
    repo = ref.split("@", 1)[0]
    head, _, tag = repo.rpartition(":")
    if head and "/" not in tag:  # a tag, not a registry's port
        repo = head
    return f"{repo}@{digest}"


def pinned_run(fingerprint: Fingerprint) -> Pinned | None:
    """The `docker run` line the build ran with, its image by digest, else by image id; None
    where the build did not run from an image by `docker run` or its line does not name the
    image as its fingerprint does."""
    image, command = fingerprint.image, fingerprint.command
    if image is None or not image.ref or not command.startswith("docker run "):
        return None
    if image.digest:
        name, by_id = pinned_name(image.ref, image.digest), False
    elif image.id:
        name, by_id = image.id, True
    else:
        return None
    word = shlex.quote(image.ref)
    found = re.search(rf"(?<= ){re.escape(word)}(?= |$)", command)
    if found is None:
        return None
    line = command[: found.start()] + shlex.quote(name) + command[found.end() :]
    return Pinned(line, name, by_id)


def failing_canary(probe: ProbeDoc) -> tuple[CanaryCase, CanaryDetails] | None:
    """The canary's first failing prompt on a build, and the check's details."""
    for check in probe.checks:
        details = check.details
        if check.passed or not isinstance(details, CanaryDetails):
            continue
        case = next((c for c in details.cases if c.problems), None)
        if case is not None:
            return case, details
    return None


def chat_body(fingerprint: Fingerprint, case: CanaryCase, details: CanaryDetails) -> str:
    """The request the canary sent for one prompt, as JSON (one line)."""
    model = fingerprint.server.model if fingerprint.server is not None else None
    body: dict[str, Any] = {
        **({"model": model} if model else {}),
        "messages": [{"role": "user", "content": case.prompt}],
        "max_tokens": case.max_tokens,
        **GREEDY,
        **details.request,
    }
    text = json.dumps(body, ensure_ascii=False)
    return _UNSEEN.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def curl_argv(endpoint: str, body: str) -> list[str]:
    """A `curl` of the chat completions of an OpenAI-compatible server with this body."""
    url = endpoint.rstrip("/") + "/v1/chat/completions"
    return ["curl", "-sS", url, "-H", "Content-Type: application/json", "-d", body]


_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def api_key_variable(command: str) -> str | None:
    """The variable a reader's shell holds the server's API key in, read from the server's
    command line as a report shows it (its secrets by their names: `--api-key
    "$LLM_BISECT_API_KEY"`, `VLLM_API_KEY="$VLLM_API_KEY"`, `-e VLLM_API_KEY`); None where
    the server asks for no key. Never the key itself."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    value = flag_value(words, "--api-key")
    if value is not None:
        found = _VARIABLE.fullmatch(value)
        return found[1] if found else "LLM_BISECT_API_KEY"
    if any(w == API_KEY_ENV or w.startswith(f"{API_KEY_ENV}=") for w in words):
        return API_KEY_ENV
    return None


def curl_line(fingerprint: Fingerprint, body: str) -> str:
    """The `curl` of curl_argv as `sh` reads it, with `Authorization: Bearer "$VAR"` where
    the server was started with an API key (the reader's own value, by its name)."""
    line = shlex.join(curl_argv(fingerprint.endpoint or "", body))
    variable = api_key_variable(fingerprint.command)
    if variable is None:
        return line
    return f'{line} -H "Authorization: Bearer ${{{variable}}}"'
