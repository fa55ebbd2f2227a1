"""Test helpers: real git histories, configs for the simulated server, process lookups."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.demo import build_history
from llm_bisect.enginecache import CACHES
from llm_bisect.model import Verdict
from llm_bisect.search import next_step

CACHE_VARIABLES = tuple(f"{name}=" for name in CACHES)
"""The engine cache's variables (on by default), first in a server's printed command line."""


def sim_command(repo: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llm_bisect.sim",
        "--repo",
        str(repo),
        "--commit",
        "{commit}",
        "--port",
        "{port}",
        *extra,
    ]


def write_config(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


def live_processes(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class History:
    """A real git repository in tmp_path whose commits play builds of an engine."""

    def __init__(self, root: Path, faults: Mapping[int, str], n: int, **kw: Any) -> None:
        self.repo = root / "engine"
        self.shas = build_history(self.repo, faults, n_commits=n, **kw)
        self.root = root
        self.configs = 0

    def config_command(self) -> list[str]:
        return sim_command(self.repo)

    def config(self, *, good: str | None = None, bad: str | None = None, **over: Any) -> Path:
        data: dict[str, Any] = {
            "candidates": {
                "repo": str(self.repo),
                "good": good or self.shas[0],
                "bad": bad or self.shas[-1],
            },
            "server": {"command": sim_command(self.repo), "ready_timeout": 20},
            # verdicts as facts: these tests follow the bisection's probes one by one
            # (probe_order); test_posterior and test_runner's lying starts weigh them
            "search": {"flake": 0},
        }
        for key, value in over.items():
            if key in data and isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        self.configs += 1
        return write_config(self.root / f"config-{self.configs}.yaml", data)


def probe_order(n: int, culprit: int) -> list[int]:
    """The indices a bisection of n+1 commits probes, in order, when `culprit` is first bad."""
    verdicts: dict[int, Verdict] = {}
    order = []
    while isinstance(step := next_step(n + 1, verdicts), int):
        order.append(step)
        verdicts[step] = Verdict.BAD if step >= culprit else Verdict.GOOD
    return order


# Text from outside that must stay text wherever it is written: markup, mentions, tracking
# images, fences, terminal escapes, characters XML 1.0 forbids, shell metacharacters.
HOSTILE_LINE = (
    "</details><img src=x onerror=alert(1)> @octocat \x1b[31mred\x1b[0m \x00\x0b\x7f\x9b "
    "![t](https://track.example/p.png) [click](javascript:alert(1)) <https://evil.example> "
    "www.evil.example https://evil.example a@evil.example | `tick` *em* $x$ &#64;team "
    "\x1b]8;;https://evil.example/\x07osc\x1b]8;;\x07"
)
HOSTILE_LOG = ["```", HOSTILE_LINE, "\x1b]52;c;cHduZWQ=\x07\x1b[2J", "````", "- @everyone"]
HOSTILE_TAGS = (
    "rc1;touch${IFS}pwned-semi;$(touch${IFS}pwned-sub)`touch${IFS}pwned-tick`",
    "rc2<img/src=x/onerror=alert(1)>@octocat&amp;|x",
)
"""Tag names git accepts (`git check-ref-format`), each a command or markup when pasted."""
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
MENTION = re.compile(r"(?<![A-Za-z0-9_])@[A-Za-z0-9]")
TAGS = {
    "p", "h1", "h2", "h3", "h4", "ul", "ol", "li", "blockquote", "strong", "code", "pre",
    "table", "thead", "tbody", "tr", "th", "td", "details", "summary", "b", "br", "a",
}  # fmt: skip
"""What llm-bisect's reports are made of (no img, em, del, script, ...)."""


@dataclass
class Rendered:
    """A report as GitHub would show it, and what in it the report did not make."""

    problems: list[str]
    text: str
    """Every visible character, entities decoded, zero-width spaces removed."""
    headings: list[str]
    fences: list[tuple[str, str]]
    """(info, content) of each fenced block."""


class _Walk(HTMLParser):
    def __init__(self, links_to: str) -> None:
        super().__init__(convert_charrefs=True)
        self.links_to, self.problems, self.quoted = links_to, [], 0
        self.text: list[str] = []
        self.headings: list[str] = []
        self.heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            self.problems.append(f"tag <{tag}> {attrs}")
        for name, value in attrs:
            if tag == "a" and name == "href":
                ok = bool(self.links_to) and (value or "").startswith(self.links_to + "/")
                if not ok:
                    self.problems.append(f"link {value!r}")
            elif not (tag in ("td", "th") and name == "style") and (tag, name) != ("code", "class"):
                self.problems.append(f"attribute {name}={value!r} on <{tag}>")
        self.quoted += tag in ("code", "pre", "a")
        if tag in ("h1", "h2", "h3", "h4"):
            self.heading = []

    def handle_endtag(self, tag: str) -> None:
        self.quoted -= tag in ("code", "pre", "a") and self.quoted > 0
        if tag in ("h1", "h2", "h3", "h4") and self.heading is not None:
            self.headings.append("".join(self.heading).replace("\u200b", ""))
            self.heading = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.heading is not None:
            self.heading.append(data)
        if not self.quoted and MENTION.search(data):
            self.problems.append(f"mention in {data.strip()[:80]!r}")


def github_render(md: str, links_to: str = "") -> Rendered:
    """report.md rendered as GitHub does (CommonMark, raw HTML, tables, strikethrough, autolinks
    of URLs, www. and emails), with every tag, link, mention and control character the
    report did not make named in `problems`; `links_to`: the web address links may go to."""
    from markdown_it import MarkdownIt

    it = MarkdownIt("commonmark", {"html": True, "linkify": True})
    it.enable(["table", "strikethrough", "linkify"])
    it.linkify.set({"fuzzy_link": False})  # GitHub links www. and scheme:// only
    it.linkify.add("//", None)
    walk = _Walk(links_to.rstrip("/"))
    walk.feed(it.render(md))
    walk.close()
    problems = walk.problems + [f"control character {c!r}" for c in CONTROL.findall(md)]
    fences = [(t.info, t.content) for t in it.parse(md) if t.type == "fence"]
    text = "".join(walk.text).replace("\u200b", "")
    return Rendered(problems, text, walk.headings, fences)


def shell_words(line: str, cwd: Path) -> list[str]:
    """The words `sh` makes of a printed command, with `printf` run in the command's place:
    `sh -n` must accept it, and a `;`, `$(...)` or backtick it lets through runs in `cwd`,
    where the canaries it creates can be seen."""
    # `--`: a line that begins with `-` is a command string, not sh's own option
    parsed = subprocess.run(["sh", "-n", "-c", "--", line], capture_output=True, text=True)
    assert parsed.returncode == 0, f"sh -n: {parsed.stderr.strip()}: {line!r}"
    done = subprocess.run(
        ["sh", "-c", "printf '%s\\0' " + line], cwd=cwd, capture_output=True, check=False
    )
    return done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


BOUNDED_MEMORY = 4 * 2**30
"""Address space of a CLI run by `cli_bounded`: a read with no cap fails there, not the node."""


def cli_bounded(*args: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """The real CLI in a subprocess whose memory is capped and whose wait is bounded (a read
    that hangs fails the test instead of hanging it); exit code and stdout+stderr."""
    import resource
    import subprocess

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (BOUNDED_MEMORY, BOUNDED_MEMORY))

    import llm_bisect

    given = dict(os.environ if env is None else env)
    source = str(Path(llm_bisect.__file__).resolve().parents[1])  # this checkout's, not another
    inherited = [p for p in given.get("PYTHONPATH", "").split(os.pathsep) if p]
    given["PYTHONPATH"] = os.pathsep.join([source, *(p for p in inherited if p != source)])
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", *args],
        capture_output=True,
        text=True,
        env=given,
        timeout=120,
        preexec_fn=cap,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def cli_on_path(folder: Path) -> dict[str, str]:
    """An environment whose PATH finds `llm-bisect` (this checkout's, on this interpreter)
    first, so that a command line as a report prints it runs as a person runs it."""
    import llm_bisect

    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "llm-bisect"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m llm_bisect.cli "$@"\n')
    shim.chmod(0o755)
    source = str(Path(llm_bisect.__file__).resolve().parents[1])
    # conftest put this checkout first already: the same PYTHONPATH as the tests' own
    # process (a server's environment is in the resume digest), not the source twice
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    python_path = os.pathsep.join([source, *(p for p in inherited if p != source)])
    path = os.pathsep.join([str(folder), os.environ.get("PATH", os.defpath)])
    return {**os.environ, "PATH": path, "PYTHONPATH": python_path}


def printed_commands(md: str, info: str = "bash") -> list[tuple[str, int]]:
    """The command lines of report.md's Reproduce block that say what they exit with
    (`cmd   # expect bad: exit 1`), each with that exit code; `info="sh"`: those of its block
    for an issue (by the attachments' names, not this machine's paths)."""
    rendered = github_render(md)
    found = []
    for fenced, content in rendered.fences:
        for line in content.splitlines() if fenced == info else []:
            said = re.search(r"\s+# expect [^#]*: exit (\d+)$", line)
            if said:
                found.append((line[: said.start()], int(said.group(1))))
    return found


def as_in_an_issue(md: str, golden: Path, repo: Path, folder: Path) -> list[tuple[str, int]]:
    """report.md's block for an issue (`### Away from this machine`) laid out as its reader
    does: the config it embeds saved as config.yaml beside the attached golden and a clone
    of the repository as `repo`, in `folder`; its command lines, each with the exit code it
    says."""
    folder.mkdir(parents=True, exist_ok=True)
    (config,) = [c for info, c in github_render(md).fences if info == "yaml"]
    (folder / "config.yaml").write_text(config)
    (folder / "golden.json").write_bytes(golden.read_bytes())
    subprocess.run(["git", "clone", "-q", str(repo), str(folder / "repo")], check=True)
    return printed_commands(md, "sh")


def vllm_gsm8k(folder: Path, questions: int = 1319) -> Path:
    """A folder laid out as vLLM's GSM8K copy (tests/evals/gsm8k/gsm8k_eval.py downloads
    ci-datasets/gsm8k/train.jsonl and test.jsonl): `questions` test rows, each a bundled
    problem with its number said (the simulator answers the bundled problem it holds), and
    8 train rows, the worked examples."""
    from importlib import resources

    text = resources.files("llm_bisect.data").joinpath("gsm8k_mini.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    folder.mkdir(parents=True, exist_ok=True)
    test = [
        {**rows[i % len(rows)], "question": f"{rows[i % len(rows)]['question']} (No. {i}.)"}
        for i in range(questions)
    ]
    for name, part in (("train", rows[:8]), ("test", test)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return folder


def run_as_printed(line: str, where: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    """A command line as the tool printed it, pasted into `sh` in `where` (a folder that is
    not the config's), with this checkout's `llm-bisect` first on PATH."""
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        ["sh", "-c", line], cwd=where, env=cli_on_path(bin_dir), capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip


def served_as_printed(server: str, curl: str, where: Path, env: Mapping[str, str]) -> str:
    """A server's command line as a report prints it, pasted into `sh` in `where`, then the
    report's `curl` pasted likewise until the server answers it; the reply (the server's
    process group ended after)."""
    where.mkdir(parents=True, exist_ok=True)
    started = subprocess.Popen(["sh", "-c", server], cwd=where, env=dict(env),
                               start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    replies: list[str] = []

    def answered() -> bool:
        done = subprocess.run(["sh", "-c", curl], cwd=where, env=dict(env), capture_output=True,
                              text=True, timeout=30, check=False)  # fmt: skip
        replies.append(done.stdout if done.returncode == 0 else "")
        return bool(replies[-1]) or started.poll() is not None

    try:
        assert wait_until(answered, timeout=30), "the server never answered the printed curl"
        assert started.poll() is None, f"the printed server line exited {started.returncode}"
        return replies[-1]
    finally:
        os.killpg(started.pid, signal.SIGTERM)
        started.wait(timeout=30)


def printed_after(output: str, lead: str) -> str:
    """The command a terminal line gives after `lead` (`later: to find the fix: CMD`)."""
    (line,) = [x for x in output.splitlines() if lead in x]
    return line.split(lead, 1)[1].strip()


def first_screen(md: str) -> str:
    """What a reader of report.md sees first: everything before its first section (`## `)
    or folded block (`<details>`)."""
    return re.split(r"^(?:## |<details>)", md, maxsplit=1, flags=re.M)[0]
