"""Try to break llm-bisect as an adversarial user would, and print what happened.

    bad inputs   mutated configs, files and folders through `run`: exit 2 with one
                 line and nothing started, or not
    hostile      servers answering malformed, deeply nested, oversized replies,
                 500s: tracebacks, and how `check` exits
    secrets      servers echoing secrets into replies, logs and 500 bodies: leaks
    kills        SIGKILLs of a real run at random moments, each resumed: culprit right,
                 finished probes never repeated, no server left behind

Figures, not assertions (the tests assert); random moments come from --seed.
Usage: python scripts/adversarial.py [--inputs 60] [--kills 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.demo import build_history
from llm_bisect.journal import read_events

CLI = [sys.executable, "-m", "llm_bisect.cli"]
Mutation = Callable[[dict[str, Any], Path], "dict[str, Any] | bytes"]


def sim(repo: Path, launches: Path) -> list[str]:
    head = [sys.executable, "-m", "llm_bisect.sim", "--repo", str(repo)]
    return [*head, "--commit", "{commit}", "--port", "{port}", "--launch-log", str(launches)]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> tuple[int, str]:
    done = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env or dict(os.environ), timeout=timeout
    )
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
                "server": {"command": sim(repo, launches), "ready_timeout": 10},
                "checks": [{"type": "canary"}, {"type": "expect"}],
            }
        )
    )
    tracebacks = 0
    print(f"hostile servers: {len(HOSTILE)} kinds, each through `check`")
    for i, name in enumerate(HOSTILE, 1):
        t0 = time.monotonic()
        code, output = cli("check", str(config), "--candidate", shas[i], timeout=600)
        # a traceback of llm-bisect's own; the server's log tail may hold the server's
        tracebacks += "Traceback" in output.split("server log")[0]
        first = output.strip().splitlines()[0] if output.strip() else ""
        print(f"  {name:<18} exit {code:3d} in {time.monotonic() - t0:5.1f}s  {first[:90]}")
    print(f"  tracebacks: {tracebacks}")


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
    values = {"hf_AdversarialSecret1", "literal-pass-1234", "ghp_CallerTokenValue9"}
    config = work / "secret.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
                "server": {
                    "command": sim(repo, launches),
                    "env": {"HF_TOKEN": "${MY_HF_TOKEN}", "DB_PASSWORD": "literal-pass-1234"},
                },
            }
        )
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=100, help="most bad inputs to try")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llm-bisect-adversarial-") as tmp:
        work = Path(tmp)
        bad_inputs(work, args.inputs)
        hostile(work)
        secrets(work)
        kills(work, args.kills, random.Random(args.seed))


if __name__ == "__main__":
    main()
