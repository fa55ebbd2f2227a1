"""Try to break llm-bisect as an adversarial user would, and print what happened.

    bad inputs   mutated configs, files and folders through `run`: exit 2 with one
                 line and nothing started, or not
    hostile      servers answering malformed, deeply nested, oversized replies,
                 500s: tracebacks, and how `check` exits
    secrets      servers echoing secrets into replies, logs and 500 bodies: leaks
    kills        SIGKILLs of a real run at random moments, each resumed: culprit right,
                 finished probes never repeated, no server left behind
    escapes      text from git, servers and logs that is markup, mentions, fences, terminal
                 escapes, XML-forbidden characters or shell: reports rendered as GitHub
                 renders them (markdown-it-py), report.html parsed, JUnit parsed, every
                 printed command run through `sh` with canaries; hostile tags and
                 candidates.url values through the CLI

Figures, not assertions (the tests assert); random moments come from --seed.
Usage: python scripts/adversarial.py [--inputs 60] [--kills 20] [--documents 300] [--seed 1]
       [--only escapes]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.checks.logprobs import LogprobsDetails
from llm_bisect.demo import build_history
from llm_bisect.fingerprint import Fingerprint
from llm_bisect.journal import read_events
from llm_bisect.model import Candidate, CheckResult, ProbeOutcome, Verdict
from llm_bisect.report.documents import Context, GateDocument, ResultDocument
from llm_bisect.report.gate import render_gate_html, render_gate_markdown, render_junit
from llm_bisect.report.html import render_html
from llm_bisect.report.markdown import render_markdown
from llm_bisect.report.result import Ran, build_result
from llm_bisect.search import Answer, Mode, Plan, Status

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers import (  # type: ignore[import-not-found]
    HOSTILE_LINE,
    HOSTILE_LOG,
    HOSTILE_TAGS,
    github_render,
    shell_words,
)

CLI = [sys.executable, "-m", "llm_bisect.cli"]
Mutation = Callable[[dict[str, Any], Path], "dict[str, Any] | bytes"]


def sim(repo: Path, launches: Path) -> list[str]:
    head = [sys.executable, "-m", "llm_bisect.sim", "--repo", str(repo)]
    return [*head, "--commit", "{commit}", "--port", "{port}", "--launch-log", str(launches)]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> tuple[int, str]:
    """Exit code and output; -9 where it ran past `timeout` (a hang)."""
    try:
        done = subprocess.run([*CLI, *args], capture_output=True, text=True,
                              env=env or dict(os.environ), timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        return -9, "hang"
    return done.returncode, done.stdout + done.stderr


def live(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmd and state != "Z":
                pids.append(int(entry.name))
    return pids


def mutations(shas: list[str], work: Path) -> list[tuple[str, Mutation]]:
    """Named ways to spoil a good config (each returns a config dict or raw file bytes)."""

    def setk(path: str, value: Any) -> Mutation:
        def apply(c: dict[str, Any], _: Path) -> dict[str, Any] | bytes:
            node: Any = c
            *parents, last = path.split(".")
            for key in parents:
                node = node.setdefault(key, {}) if isinstance(node, dict) else node[int(key)]
            if isinstance(node, list):
                node[int(last)] = value
            else:
                node[last] = value
            return c

        return apply

    def drop(path: str) -> Mutation:
        def apply(c: dict[str, Any], _: Path) -> dict[str, Any] | bytes:
            *parents, last = path.split(".")
            node = c
            for key in parents:
                node = node[key]
            del node[last]
            return c

        return apply

    def file_with(name: str, data: bytes, key: str) -> Mutation:
        def apply(c: dict[str, Any], folder: Path) -> dict[str, Any] | bytes:
            (folder / name).write_bytes(data)
            return setk(key, str(folder / name))(c, folder)

        return apply

    golden_other = json.dumps(
        {"version": 2, "commit": shas[1], "checks": {}, "calibration": None}
    ).encode()
    cases: list[tuple[str, Mutation]] = [
        ("unknown top key", setk("bogus", 1)),
        ("unknown nested key", setk("candidates.goood", "x")),
        ("missing repo", drop("candidates.repo")),
        ("missing bad", drop("candidates.bad")),
        ("missing server", drop("server")),
        ("no such ref", setk("candidates.good", "nightly-0809")),
        ("ref like an option", setk("candidates.bad", "--all")),
        ("empty ref", setk("candidates.good", "")),
        ("same ends", setk("candidates.bad", shas[0])),
        ("ends swapped", setk("candidates.good", shas[-1])),
        ("repo missing", setk("candidates.repo", str(work / "nope"))),
        ("repo a file", setk("candidates.repo", str(Path(__file__)))),
        ("command a string", setk("server.command", "serve --port {port}")),
        ("command empty", setk("server.command", [])),
        ("unknown placeholder", setk("server.command.0", "{prot}")),
        ("malformed template", setk("server.command.0", "{port")),
        ("no such program", setk("server.command.0", "/nonexistent/vllm")),
        ("program not on PATH", setk("server.command.0", "no-such-vllm-xyz")),
        ("negative timeout", setk("server.ready_timeout", -1)),
        ("infinite timeout", setk("server.ready_timeout", float("inf"))),
        ("nan timeout", setk("server.request_timeout", float("nan"))),
        ("timeout a string", setk("server.ready_timeout", "soon")),
        ("unknown launcher", setk("server.launcher", "k8s")),
        ("env unset", setk("server.env", {"HF_TOKEN": "${LLM_BISECT_SURELY_UNSET}"})),
        ("env a list", setk("server.env", ["A=1"])),
        ("cwd missing", setk("server.cwd", "nope")),
        ("reply cap zero", setk("server.max_reply_mb", 0)),
        ("unknown check", setk("checks", [{"type": "vibes"}])),
        ("check without type", setk("checks", [{"prompts": ["hi"]}])),
        ("absurd max_tokens", setk("checks", [{"type": "canary", "max_tokens": 10**12}])),
        (
            "bad regex",
            setk("checks", [{"type": "expect", "cases": [{"prompt": "p", "match": "("}]}]),
        ),
        ("no checks", setk("checks", [])),
        ("repeats zero", setk("probe.repeats", 0)),
        ("eval path missing", setk("checks", [{"type": "eval", "path": "nope.jsonl"}])),
        ("golden missing", setk("golden", str(work / "none.json"))),
    ]
    for name, data in [
        ("eval rows not objects", b"[1, 2]\n"),
        ("eval empty", b"\n"),
        ("eval not UTF-8", b'{"question": "caf\xe9", "answer": "#### 1"}\n'),
        ("eval not JSON", b"{{{{\n"),
        ("eval nested", b"[" * 100_000 + b"]" * 100_000 + b"\n"),
        ("eval answer without ####", b'{"question": "q", "answer": "7"}\n'),
    ]:
        cases.append(
            (
                name,
                _then(
                    setk("checks", [{"type": "eval", "path": "x"}]),
                    file_with(f"{name}.jsonl", data, "checks.0.path"),
                ),
            )
        )
    for name, data in [
        ("golden not JSON", b"{"),
        ("golden a list", b"[1, 2]"),
        ("golden wrong types", b'{"version": 2, "commit": "x", "checks": {"eval": {"n": "a"}}}'),
        ("golden nested", b"[" * 100_000 + b"]" * 100_000),
        ("golden of another commit", golden_other),
    ]:
        cases.append((name, file_with(f"{name}.json", data, "golden")))
    for name, raw in [
        ("config not UTF-8", b"candidates: {repo: caf\xe9}\n"),
        ("config not YAML", b"candidates: [unclosed\n"),
        ("config a list", b"- 1\n- 2\n"),
        ("config empty", b""),
        ("config nested", b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n"),
        ("config binary", bytes(range(256))),
    ]:
        cases.append((name, _raw(raw)))
    return cases


def _raw(data: bytes) -> Mutation:
    def apply(c: dict[str, Any], folder: Path) -> bytes:
        return data

    return apply


def _then(first: Mutation, second: Mutation) -> Mutation:
    def apply(c: dict[str, Any], folder: Path) -> dict[str, Any] | bytes:
        out = first(c, folder)
        assert isinstance(out, dict)
        return second(out, folder)

    return apply


def bad_inputs(work: Path, limit: int) -> None:
    repo, launches = work / "engine", work / "launches"
    shas = build_history(repo, {5: "degenerate-content"}, n_commits=8)
    base = {
        "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
        "server": {"command": sim(repo, launches), "ready_timeout": 30},
        "checks": [{"type": "canary"}, {"type": "eval", "limit": 4}],
    }
    cases = mutations(shas, work)[:limit]
    outcomes: Counter[str] = Counter()
    for i, (name, mutate) in enumerate(cases):
        folder = work / f"in-{i}"
        folder.mkdir()
        made = mutate(copy.deepcopy(base), folder)
        config = folder / "config.yaml"
        config.write_bytes(made if isinstance(made, bytes) else yaml.safe_dump(made).encode())
        code, output = cli("run", str(config), "--out", str(folder / "out"), timeout=120)
        lines = output.strip().splitlines()
        started = launches.exists() and launches.read_text().strip()
        if "Traceback" in output:
            kind = "traceback"
        elif code == 2 and len(lines) == 1 and not started:
            kind = "exit 2, one line, nothing started"
        else:
            kind = f"exit {code}{', started a server' if started else ''}"
        outcomes[kind] += 1
        if kind != "exit 2, one line, nothing started":
            print(f"    {name}: {kind}: {lines[-1][:120] if lines else ''}")
        launches.unlink(missing_ok=True)
    (work / "out-file").write_text("")
    code, output = cli("run", str(work / "in-0" / "config.yaml"), "--out", str(work / "out-file"))
    outcomes["exit 2, one line, nothing started" if code == 2 else f"exit {code}"] += 1
    print(f"bad inputs: {sum(outcomes.values())} tried")
    for kind, count in outcomes.most_common():
        print(f"  {count:4d}  {kind}")


HOSTILE = {
    "message a string": {"reply": '{"choices": [{"message": "hello"}]}'},
    "token_ids of text": {
        "reply": '{"choices": [{"message": {"content": "4"}, "token_ids": ["abc"]}]}'
    },
    "logprob of text": {
        "reply": '{"choices": [{"message": {"content": "4"}, "logprobs": {"content": '
        '[{"token": "4", "logprob": "x"}]}}]}'
    },
    "nested reply": {"reply": '{"choices": ' + "[" * 100_000 + "]" * 100_000 + "}"},
    "nested models": {"models": '{"data": ' + "[" * 100_000 + "]" * 100_000 + "}"},
    "not JSON": {"reply": "<html>502 Bad Gateway</html>"},
    "100 MB reply": {"pad": 100_000_000},
    "500 with env": {"error_env": ["HF_TOKEN"]},
    "trickle": {"trickle": True},  # a byte every 0.2 s: bounded by request_timeout, whole
    "NaN logprobs": {
        "reply": '{"choices": [{"message": {"content": "4"}, "logprobs": '
        '{"content": [{"token": "4", "logprob": NaN, "top_logprobs": []}]}}]}'
    },
}


def hostile(work: Path) -> None:
    repo, launches = work / "hostile-engine", work / "launches-h"
    shas = build_history(
        repo,
        {},
        n_commits=len(HOSTILE),
        changes={i + 1: {"hostile": h} for i, h in enumerate(HOSTILE.values())},
    )
    config = work / "hostile.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
                "server": {
                    "command": sim(repo, launches),
                    "ready_timeout": 10,
                    "request_timeout": 5,
                },
                "checks": [{"type": "canary"}, {"type": "expect"}],
            }
        )
    )
    tracebacks = hangs = 0
    print(f"hostile servers: {len(HOSTILE)} kinds, each through `check`")
    for i, name in enumerate(HOSTILE, 1):
        t0 = time.monotonic()
        code, output = cli("check", str(config), "--candidate", shas[i], timeout=300)
        # a traceback of llm-bisect's own; the server's log tail may hold the server's;
        # an exit 129 "internal error" counts as one
        tracebacks += "Traceback" in output.split("server log")[0] or code == 129
        hangs += code == -9
        first = output.strip().splitlines()[0] if output.strip() else ""
        print(f"  {name:<18} exit {code:3d} in {time.monotonic() - t0:5.1f}s  {first[:90]}")
    nan = work / "nan-engine"  # NaN logprobs on the golden's text: bad, not "max |Δ| 0.000"
    nan_shas = build_history(nan, {2: "nan-logprobs"}, n_commits=3)
    nan_config = work / "nan.yaml"
    nan_config.write_text(yaml.safe_dump({
        "candidates": {"repo": str(nan), "good": nan_shas[0], "bad": nan_shas[-1]},
        "server": {"command": sim(nan, launches), "ready_timeout": 10},
        "checks": [{"type": "logprobs"}], "search": {"flake": 0},
    }))  # fmt: skip
    code, output = cli("run", str(nan_config), "--out", str(work / "nan-out"))
    wrong = code != 0 or f"found: {nan_shas[2]}" not in output
    code, again = cli("report", str(work / "nan-out"))
    wrong |= code != 0
    tracebacks += "Traceback" in output + again
    print(f"  NaN logprobs bisected: {'wrong' if wrong else 'right'}, documents read back")
    print(f"  tracebacks: {tracebacks}  hangs: {hangs}")


def secrets(work: Path) -> None:
    repo, launches = work / "secret-engine", work / "launches-s"
    names = ["HF_TOKEN", "DB_PASSWORD", "GITHUB_TOKEN"]
    shas = build_history(
        repo,
        {6: "degenerate-content"},
        n_commits=8,
        settings={"hostile": {"echo_env": names}, "print_env": names},
        changes={4: {"hostile": {"error_env": names}}, 5: {"hostile": {"echo_env": names}}},
    )
    values = {"hf_AdversarialSecret1", "literal-pass-1234", "ghp_CallerTokenValue9",
              "urlLoginToken77", "argvApiKey88", "fastEnvToken99", "buildArgvKey66"}  # fmt: skip
    config = work / "secret.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
                "server": {
                    # a URL login and an --api-key in the argv, as a server flag
                    "command": [*sim(repo, launches), "--otlp-traces-endpoint",
                                "https://u:urlLoginToken77@h/", "--api-key", "argvApiKey88"],
                    "env": {"HF_TOKEN": "${MY_HF_TOKEN}", "DB_PASSWORD": "literal-pass-1234"},
                },
                "probe": {"fast": {"env": {"MY_FAST_TOKEN": "fastEnvToken99"}}},
                "build": {"cache": {"dir": str(work / "secret-cache")}, "strategies": [
                    {"type": "command", "run": ["true", "--api-key", "buildArgvKey66"]}]},
            }
        )
    )  # fmt: skip
    env = {**os.environ, "MY_HF_TOKEN": "hf_AdversarialSecret1"}
    env["GITHUB_TOKEN"] = "ghp_CallerTokenValue9"
    out = work / "secret-out"
    _, said = cli("run", str(config), "--out", str(out), env=env)
    golden = work / "secret-golden.json"
    _, said2 = cli("golden", str(config), "--candidate", shas[0], "-o", str(golden), env=env)
    _, said3 = cli("check", str(config), "--candidate", shas[4], "--golden", str(golden), env=env)
    texts = {"terminal": said + said2 + said3}
    texts |= {str(p): p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}
    texts[str(golden)] = golden.read_text()
    cache = work / "secret-cache"
    texts |= {str(p): p.read_text(errors="replace") for p in cache.rglob("*") if p.is_file()}
    leaks = [(where, v) for where, text in texts.items() for v in values if v in text]
    echoed = sum(text.count("=***") for text in texts.values())
    print(f"secrets: {len(values)} values, {len(texts)} outputs read, {echoed} masked echoes")
    print(f"  leaks: {len(leaks)}")
    for where, value in leaks:
        print(f"    {value} in {where}")


def kills(work: Path, count: int, rng: random.Random) -> None:
    """Bisections killed at random moments and resumed, until `count` kills are done."""
    killed = left_behind = runs = wrong = repeated = bisections = 0
    while killed < count:
        bisections += 1
        repo, launches = work / f"kill-engine-{bisections}", work / f"launches-k{bisections}"
        culprit = rng.randrange(1, 41)
        shas = build_history(
            repo, {culprit: "degenerate-reasoning"}, n_commits=40, settings={"startup_delay": 0.3}
        )
        config = work / f"kill-{bisections}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
                    "server": {"command": sim(repo, launches), "ready_timeout": 60},
                    # verdicts as facts: each commit once, so a second probe of one is a
                    # finished probe repeated (the posterior search re-probes on purpose)
                    "search": {"flake": 0},
                }
            )
        )
        out = work / f"kill-out-{bisections}"
        while True:
            runs += 1
            proc = subprocess.Popen(
                [*CLI, "run", str(config), "--out", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                proc.wait(timeout=rng.uniform(0.2, 3.0) if killed < count else 600)
                break
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed += 1
            deadline = time.monotonic() + 15
            while live(str(repo)) and time.monotonic() < deadline:
                time.sleep(0.05)
            left_behind += bool(live(str(repo)))
        result = json.loads((out / "result.json").read_text())
        events = read_events(out / "journal.jsonl")
        finished = Counter(e["outcome"]["commit"] for e in events if e["event"] == "probe")
        repeated += sum(n > 1 for n in finished.values())
        wrong += (result.get("culprit") or {}).get("commit") != shas[culprit]
    print(f"kills: {killed} SIGKILLs over {runs} runs of {bisections} bisections (41 commits)")
    print(f"  wrong culprits: {wrong}; finished probes repeated: {repeated}; ", end="")
    print(f"servers that outlived a kill by 15 s: {left_behind}")


PAYLOADS = [
    HOSTILE_LINE,
    *HOSTILE_LOG,
    "</details></summary></code></pre>",
    "<script>alert(1)</script>",
    "<svg/onload=alert(1)>",
    '"><img src=x onerror=alert(1)>',
    "</script><img src=x onerror=alert(1)>",
    "```bash\nrm -rf ~\n```",
    "~~~\n</details>",
    "| a | b |\n|---|---|",
    "@octocat @org/team a@b.co &#64;x",
    "[x](javascript:alert(1)) [y]: https://evil.example",
    "![t](https://track.example/p.png)",
    "https://evil.example www.evil.example <https://evil.example>",
    "$\\color{red}x$ $$x$$",
    "# heading\n- item\n> quote\n1. one\n===",
    "\x1b]8;;https://evil.example\x07link\x1b]8;;\x07",
    "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[31m",
    "\x00\x01\x08\x0b\x0c\x1f\x7f\x85\x9b\ufffe\uffff\u202e\u2066",
    "$(touch pwned-sub) `touch pwned-tick` ;touch pwned-semi\ntouch pwned-nl",
    "'\"\\|*_[]<>&~$#!",
]
FOREIGN = ("img", "iframe", "object", "embed", "svg", "form", "base", "link")
"""Tags report.html never writes itself."""


class _Tags(HTMLParser):
    """Every tag and attribute of a page, script contents left unparsed (as a browser does)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def html_problems(page: str) -> list[str]:
    """What in report.html the page did not make: images, frames, event handlers, links
    that are not http(s) (a script's text is not parsed, as in a browser)."""
    tags = _Tags()
    tags.feed(page)
    problems = []
    for tag, attrs in tags.tags:
        if tag in FOREIGN or (tag == "meta" and attrs != [("charset", "utf-8")]):
            problems.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on") or (
                name in ("href", "src", "action")
                and not (value or "").startswith(("https://", "http://"))
            ):
                problems.append(f"{name}={value!r} on <{tag}>")
    return problems


def junit_problems(text: str) -> list[str]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        return [f"not well-formed: {exc}"]
    made = {"testsuite", "testcase", "failure", "error", "properties", "property"}
    return [f"<{e.tag}>" for e in root.iter() if e.tag not in made]


def _say(rng: random.Random) -> str:
    return "".join(rng.choice(PAYLOADS) for _ in range(rng.randint(1, 3)))


def hostile_doc(rng: random.Random) -> ResultDocument:
    """A found result whose every text from outside is hostile."""
    seq = tuple(
        Candidate(f"{i:040x}", subject=_say(rng), author=_say(rng), date=_say(rng))
        for i in range(5)
    )
    plan = Plan(Mode.REGRESSION, seq)
    answer = Answer(Status.FOUND, seq[3], (seq[2].commit, seq[3].commit), _say(rng))

    def probe(i: int, verdict: Verdict) -> ProbeOutcome:
        side = {"token": _say(rng), "text": _say(rng), "logprob": -0.5, "top": []}
        side["top"] = [{"token": _say(rng), "text": _say(rng), "logprob": -1.0}]
        case = {
            "prompt": _say(rng),
            "first_divergence": 1,
            "teacher_mean_abs_delta": 0.4,
            "teacher_deltas": [0.0, 0.5],
            "divergence": {"position": 1, "golden": side, "candidate": dict(side)},
        }
        checks = (
            CheckResult(_say(rng), verdict is Verdict.GOOD, 0.5, _say(rng)),
            CheckResult(
                "logprobs",
                verdict is Verdict.GOOD,
                0.5,
                _say(rng),
                LogprobsDetails.model_validate({"cases": [case]}),
            ),
        )
        fingerprint = {
            "command": _say(rng),
            "image": {"ref": _say(rng), "digest": _say(rng), "labels": {_say(rng): _say(rng)}},
            "kernels": {"attention_backend": _say(rng)},
        }
        return ProbeOutcome(
            seq[i].commit,
            verdict,
            _say(rng),
            checks,
            {"total": 1.0},
            _say(rng),
            Fingerprint.model_validate(fingerprint),
        )

    probes = [probe(0, Verdict.GOOD), probe(4, Verdict.BAD), probe(1, Verdict.SKIP)]
    probes += [probe(2, Verdict.GOOD), probe(3, Verdict.BAD)]
    context = {
        "good_ref": _say(rng),
        "bad_ref": _say(rng),
        "config": _say(rng),
        "repo_url": rng.choice(["https://github.com/o/r", _say(rng), "javascript:alert(1)"]),
        "environment": {"os": _say(rng), "gpus": [{"name": _say(rng)}], "driver": _say(rng)},
    }
    typed = build_result(
        plan, answer, probes, Ran(warnings=[_say(rng)], context=Context.model_validate(context))
    )
    result = typed.model_dump(mode="json")
    result["thresholds"] = {_say(rng): {_say(rng): {"value": 1.0, "from": _say(rng)}}}
    result["localization"] = {
        "line": _say(rng),
        "why": _say(rng),
        "good": seq[2].commit,
        "bad": seq[3].commit,
        "forced": [_say(rng)],
        "seconds": {_say(rng): 1.0},
        "ranks": [{"rank": 0, "curve": [[_say(rng), 2.0]]}],
        "rank": 0,
    }
    return ResultDocument.model_validate(result)


def _git_text(text: str) -> str:
    """What a commit message can hold (no NUL, valid UTF-8)."""
    return re.sub("[\x00\ud800-\udfff]", "", text)


def _links_to(doc: ResultDocument | GateDocument) -> str:
    url = doc.context.repo_url
    return url if url == "https://github.com/o/r" else ""


def escapes(work: Path, documents: int, rng: random.Random) -> None:
    """Hostile text in every place a report, a JUnit file or a printed command writes it."""
    live: Counter[str] = Counter()
    cases = one_line = tracebacks = lines_run = pasted = 0
    for _ in range(documents):  # pure renders of hostile documents
        doc = hostile_doc(rng)
        cases += 1
        live["report.md"] += bool(github_render(render_markdown(doc), _links_to(doc)).problems)
        live["report.html"] += bool(html_problems(render_html(doc)))
    repo, launches = work / "escape-engine", work / "launches-e"
    subject = HOSTILE_LINE.replace("\x00", "")
    shas = build_history(
        repo,
        {4: "crash-on-start", 5: "none", 6: "degenerate-content"},
        n_commits=8,
        subjects={i: _git_text(f"{_say(rng)} {subject} (#2400{i})") for i in range(1, 9)},
        authors=dict.fromkeys(range(9), ("@everyone ![t](https://t.example/a.png)", "x@e.example")),
        changes={
            4: {"log_lines": HOSTILE_LOG},
            5: {"log_lines": []},
            6: {"hostile": {"say": HOSTILE_LINE}},
            7: {"fault": "crash-on-start", "log_lines": PAYLOADS},
        },
    )
    tags = [*HOSTILE_TAGS, "v1$(touch${IFS}pwned-v)", "t`touch${IFS}p`|<b>x</b>&lt;@a"]
    for tag, sha in zip(tags, (shas[-1], shas[0], shas[6], shas[7]), strict=True):
        subprocess.run(["git", "-C", str(repo), "tag", tag, sha], check=True)
    folder = work / "cfg $(touch pwned-cfg)"
    folder.mkdir()
    base: dict[str, Any] = {
        "candidates": {"repo": str(repo), "good": tags[1], "bad": tags[0]},
        "server": {"command": sim(repo, launches), "ready_timeout": 30},
        "checks": [{"type": "canary"}, {"type": "expect"}, {"type": "logprobs"}],
    }
    config = folder / "c `touch pwned-tick`;touch pwned-semi.yaml"
    config.write_text(
        yaml.safe_dump(
            {**base, "candidates": {**base["candidates"], "url": "https://github.com/o/r"}}
        )
    )
    outs: list[tuple[Path, str]] = []
    code, output = cli("run", str(config), "--out", str(work / "escape-run"))
    cases += 1
    tracebacks += "Traceback" in output
    outs.append((work / "escape-run", "run"))
    golden = work / "g;touch pwned-g" / "golden.json"
    cli("golden", str(config), "--candidate", tags[1], "-o", str(golden))
    for tag in (tags[0], tags[2], tags[3]):
        out = work / f"escape-gate-{len(outs)}"
        code, output = cli(
            "gate", str(config), "--candidate", tag, "--golden", str(golden),
            "--out", str(out), "--junit", str(out / "junit.xml"),
        )  # fmt: skip
        cases += 1
        tracebacks += "Traceback" in output
        outs.append((out, "gate"))
    sh = work / "sh"
    sh.mkdir()
    for out, kind in outs:
        md = (out / "report.md").read_text()
        shown = github_render(md, "https://github.com/o/r")
        live["report.md"] += bool(shown.problems)
        page = (out / "report.html").read_text()
        live["report.html"] += bool(html_problems(page))
        if kind == "gate":
            live["JUnit"] += bool(junit_problems((out / "junit.xml").read_text()))
        for info, content in shown.fences:
            if info == "bash":
                for line in content.splitlines() if kind == "run" else [content]:
                    words = shell_words(line, sh) if line.strip() else []
                    lines_run += 1
                    pasted += bool(words) and words[0] not in ("llm-bisect", sys.executable)
    for gate in (p for p, kind in outs if kind == "gate"):  # JUnit of hostile documents too
        held = GateDocument.model_validate_json((gate / "gate.json").read_bytes())
        for _ in range(max(1, documents // 10)):
            said = held.probe.model_copy(update={"reason": _say(rng), "log_tail": _say(rng)})
            fake = held.model_copy(update={"candidate_ref": _say(rng), "probe": said})
            cases += 1
            live["JUnit"] += bool(junit_problems(render_junit(fake)))
            md = render_gate_markdown(fake)
            live["report.md"] += bool(github_render(md, _links_to(fake)).problems)
            live["report.html"] += bool(html_problems(render_gate_html(fake)))
    ran = sorted(p.name for p in sh.iterdir())
    bad_urls = ["javascript:alert(1)", "data:text/html,x", 'https://x/r"><img>', " http://x/r"]
    for url in bad_urls:  # one line, exit 2, nothing started
        bad = work / f"url-{len(url)}.yaml"
        bad.write_text(yaml.safe_dump({**base, "candidates": {**base["candidates"], "url": url}}))
        code, output = cli("run", str(bad), "--out", str(work / "url-out"))
        cases += 1
        tracebacks += "Traceback" in output
        one_line += code == 2 and len(output.strip().splitlines()) == 1
    for tag in ["nope$(touch pwned-x)", "x`id`<img src=x onerror=alert(1)>\x1b[2J"]:
        code, output = cli("check", str(config), "--candidate", tag)
        cases += 1
        tracebacks += "Traceback" in output
        lines = output.strip().splitlines()
        one_line += code == 128 and len(lines) == 1 and "\x1b" not in output
    print(f"escapes: {cases} cases ({documents} hostile documents rendered, a run and 3 gates")
    print(f"  on a hostile history, {len(bad_urls)} bad candidates.url, 2 hostile refs)")
    print(f"  one-line errors: {one_line} of {len(bad_urls) + 2}; tracebacks: {tracebacks}")
    print(
        f"  live markup: report.md {live['report.md']}, report.html {live['report.html']}, ", end=""
    )
    print(f"JUnit {live['JUnit']}")
    print(
        f"  printed command lines run through sh: {lines_run}; commands they ran: {len(ran)}",
        end="",
    )
    print(f"{' ' + ', '.join(ran) if ran else ''}; other programs: {pasted}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=100, help="most bad inputs to try")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--documents", type=int, default=300, help="hostile documents rendered")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=["inputs", "hostile", "secrets", "kills", "escapes"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llm-bisect-adversarial-") as tmp:
        work = Path(tmp)
        if args.only in (None, "inputs"):
            bad_inputs(work, args.inputs)
        if args.only in (None, "hostile"):
            hostile(work)
        if args.only in (None, "secrets"):
            secrets(work)
        if args.only in (None, "escapes"):
            escapes(work, args.documents, random.Random(args.seed))
        if args.only in (None, "kills"):
            kills(work, args.kills, random.Random(args.seed))


if __name__ == "__main__":
    main()
