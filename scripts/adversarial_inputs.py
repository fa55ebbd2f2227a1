#!/usr/bin/env python3
"""Bad input an adversarial user would paste, through the real CLI: does each give one line,
the right exit code, no traceback, no hang, no unbounded read, and start nothing?

    golden       of another server command, check settings, model or repository; without
                 an identity; of another version or shape (check, gate, run, calibrate)
    templates    Slurm `host` placeholders, conversions and format specs in templates
    request      extra_body / chat_template_kwargs that are not JSON (.nan, .inf, dates,
                 binary, sets, non-string keys)
    eval source  dataset_config, split or download without dataset; an unknown dataset
    files        the config, golden and eval path as a FIFO, a device, a folder, a huge
                 file (sparse), a symlink to /dev/zero
    localize     the same build as --good and --bad
    colon        a rule over the whole config (no stray ": " before it)
    yaml         an alias bomb, a value that holds itself, a 4,400-digit integer, a NUL byte
    eval files   vLLM eval configs with .nan/.inf thresholds and waits, a 400-digit wait, an
                 unbalanced quote, JSON in server_args (read, not refused), gen_kwargs as a
                 string
    harness      lm-eval writing invalid JSON, a list for results, samples without doc_id
    paths        include_path: /, a SHA-256 repository, engine_cache.dir naming a file

Each case runs in a subprocess capped at 4 GiB of address space and 120 s. Figures, not
assertions (the tests assert).
Usage: python scripts/adversarial_inputs.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.demo import build_history

CLI = [sys.executable, "-m", "llm_bisect.cli"]
CAP = 4 * 2**30
USAGE = {"check": 128, "gate": 128}
"""Exit code of bad input per command; 2 for the others."""


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    try:
        done = subprocess.run(
            [*CLI, *args],
            capture_output=True,
            text=True,
            env=env or dict(os.environ),
            timeout=120,
            preexec_fn=cap,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout + done.stderr


class Bench:
    """A history, a base config and a launch log that says whether any server started."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.repo = work / "engine"
        self.shas = build_history(self.repo, {}, n_commits=4)
        self.launches = work / "launches"
        self.n = 0

    def command(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llm_bisect.sim",
            "--repo",
            str(self.repo),
            "--commit",
            "{commit}",
            "--port",
            "{port}",
            "--launch-log",
            str(self.launches),
            *extra,
        ]

    def config(self, **over: Any) -> Path:
        data: dict[str, Any] = {
            "candidates": {"repo": str(self.repo), "good": self.shas[0], "bad": self.shas[-1]},
            "server": {"command": self.command(), "ready_timeout": 30},
            "checks": [{"type": "canary"}, {"type": "logprobs"}],
        }
        for key, value in over.items():
            data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
        self.n += 1
        path = self.work / f"config-{self.n}.yaml"
        path.write_text(yaml.dump(data))  # yaml.dump: .nan, dates, binary and sets as YAML has them
        return path

    def started(self) -> bool:
        return self.launches.exists() and bool(self.launches.read_text().strip())


def golden_cases(b: Bench) -> list[tuple[str, list[str]]]:
    """(name, argv) of golden files that do not fit the config, for each command."""
    base = b.config()
    good = b.work / "golden.json"
    code, out = cli("golden", str(base), "--candidate", b.shas[0], "-o", str(good))
    assert code == 0, out
    b.launches.unlink()
    doc = json.loads(good.read_text())
    goldens: dict[str, Path] = {}

    def write(name: str, data: Any) -> None:
        goldens[name] = b.work / f"golden-{name}.json"
        text = data if isinstance(data, bytes) else json.dumps(data).encode()
        goldens[name].write_bytes(text)

    write("no identity", {k: v for k, v in doc.items() if k != "identity"})
    write("identity empty", {**doc, "identity": {}})
    write("identity wrong types", {**doc, "identity": {"server": 1, "checks": []}})
    write("version 1", {**doc, "version": 1})
    write("version text", {**doc, "version": "2"})
    write("commit not in repo", {**doc, "commit": "f" * 40})
    write(
        "identity of other checks", {**doc, "identity": {**doc.get("identity", {}), "checks": {}}}
    )
    other_repo = b.work / "other-engine"
    other = build_history(other_repo, {}, n_commits=1, subjects={0: "another project"})
    write("of another repository", {**doc, "commit": other[0]})
    configs = {
        "another server": b.config(server={"command": b.command("--fault", "numerics")}),
        "other canary prompts": b.config(
            checks=[{"type": "canary", "prompts": ["hi"]}, {"type": "logprobs"}]
        ),
        "other logprobs budget": b.config(
            checks=[{"type": "canary"}, {"type": "logprobs", "max_tokens": 8}]
        ),
        "another model": b.config(server={"model": "another-model"}),
        "another env": b.config(server={"env": {"VLLM_ATTENTION_BACKEND": "TRITON"}}),
        "an extra check": b.config(
            checks=[{"type": "canary"}, {"type": "logprobs"}, {"type": "expect"}]
        ),
    }
    cases: list[tuple[str, list[str]]] = []
    for name, path in goldens.items():
        cases.append(
            (
                f"golden {name}: check",
                ["check", str(base), "--candidate", b.shas[1], "--golden", str(path)],
            )
        )
        cases.append(
            (
                f"golden {name}: gate",
                [
                    "gate",
                    str(base),
                    "--candidate",
                    b.shas[1],
                    "--golden",
                    str(path),
                    "--out",
                    str(b.work / "gate"),
                    "--bisect-on-block",
                ],
            )
        )
        run_config = b.config(golden=str(path))
        cases.append(
            (
                f"golden {name}: run",
                ["run", str(run_config), "--out", str(b.work / f"run-{len(cases)}")],
            )
        )
    for name, config in configs.items():
        cases.append(
            (
                f"config {name}: check",
                ["check", str(config), "--candidate", b.shas[1], "--golden", str(good)],
            )
        )
        cases.append(
            (
                f"config {name}: gate",
                [
                    "gate",
                    str(config),
                    "--candidate",
                    b.shas[1],
                    "--golden",
                    str(good),
                    "--out",
                    str(b.work / "gate"),
                ],
            )
        )
        cases.append(
            (
                f"config {name}: calibrate",
                ["calibrate", str(config), "--candidate", b.shas[0], "-o", str(good)],
            )
        )
    return cases


def config_cases(b: Bench) -> list[tuple[str, dict[str, Any]]]:
    """(name, config overrides) that must be refused when the config is read."""
    slurm = {"launcher": "slurm", "command": ["python", "-m", "x"]}
    hosts = [
        "{nodex}",
        "{node",
        "{commit}",
        "{}",
        "{0}",
        "{node!r}",
        "{node:>9}",
        "{node.x}",
        "{node[0]}",
        "}",
        "{{node}",
        "{node}}",
    ]
    cases: list[tuple[str, dict[str, Any]]] = [
        (f"slurm host {h!r}", {"server": {**slurm, "host": h}}) for h in hosts
    ]
    for template in ["{port:d}", "{commit!s}", "{short:.3}", "{port!r:>5}"]:
        command = b.command()
        cases.append((f"command {template}", {"server": {"command": [*command, template]}}))
    cases.append(
        (
            "image {commit:x}",
            {"server": {"launcher": "docker", "image": "x:{commit:x}", "command": None}},
        )
    )
    bodies: list[tuple[str, Any]] = [
        ("nan", float("nan")),
        ("inf", float("inf")),
        ("-inf", float("-inf")),
        ("nested nan", {"a": [1, {"b": float("nan")}]}),
        ("date", __import__("datetime").date(2026, 8, 9)),
        ("binary", b"\x00\x01"),
        ("set", {1, 2}),
    ]
    for name, value in bodies:
        for key in ("extra_body", "chat_template_kwargs"):
            cases.append((f"{key} {name}", {"checks": [{"type": "canary", key: {"x": value}}]}))
    cases.append(("extra_body int key", {"checks": [{"type": "canary", "extra_body": {1: 2}}]}))
    cases.append(
        (
            "chat_template_kwargs deep int key",
            {"checks": [{"type": "canary", "chat_template_kwargs": {"a": {1: 2}}}]},
        )
    )
    for key, value in (("dataset_config", "main"), ("split", "train"), ("download", True)):
        cases.append((f"{key} without dataset", {"checks": [{"type": "eval", key: value}]}))
    cases.append(
        (
            "unknown dataset offline",
            {"checks": [{"type": "eval", "dataset": "no-such-org/no-such-set"}]},
        )
    )
    cases.append(
        (
            "dataset a missing folder",
            {"checks": [{"type": "eval", "dataset": str(b.work / "nope")}]},
        )
    )
    cases.append(
        (
            "save_tensors with docker",
            {
                "server": {"launcher": "docker", "image": "x:{commit}", "command": None},
                "localize": {"save_tensors": True},
            },
        )
    )
    return cases


def file_cases(b: Bench) -> list[tuple[str, Callable[[Path], None], str]]:
    """(name, make the file at a path, where it goes: config, golden or eval)."""

    def sparse(size: int) -> Callable[[Path], None]:
        def make(p: Path) -> None:
            with p.open("wb") as f:
                f.truncate(size)

        return make

    kinds: list[tuple[str, Callable[[Path], None]]] = [
        ("fifo", os.mkfifo),
        ("/dev/zero", lambda p: p.symlink_to("/dev/zero")),
        ("/dev/null", lambda p: p.symlink_to("/dev/null")),
        ("/dev/urandom", lambda p: p.symlink_to("/dev/urandom")),
        ("a folder", lambda p: p.mkdir()),
        ("huge sparse", sparse(2**31)),
        ("dangling link", lambda p: p.symlink_to(b.work / "nowhere")),
    ]
    return [
        (f"{where} {kind}", make, where)
        for kind, make in kinds
        for where in ("config", "golden", "eval jsonl", "eval parquet")
    ]


FAKE_LM_EVAL = """#!{python}
import json, os, pathlib, sys
if "--output_path" not in sys.argv:
    sys.exit(0)
out = pathlib.Path(sys.argv[sys.argv.index("--output_path") + 1]) / "served"
out.mkdir(parents=True)
(out / "samples_t_2026-01-01T00-00-00.0.jsonl").write_text(os.environ["FAKE_SAMPLES"])
(out / "results_2026-01-01T00-00-00.0.json").write_text(os.environ["FAKE_RESULTS"])
"""


def _bomb() -> str:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines)


def newer_cases(b: Bench) -> list[tuple[str, list[str], dict[str, str], bool]]:
    """(name, argv, extra environment, whether it must succeed) of the classes issue 33 named:
    raw YAML, vLLM eval files, lm-eval output, paths git or Python cannot take."""
    head = yaml.safe_dump({
        "candidates": {"repo": str(b.repo), "good": b.shas[0], "bad": b.shas[-1]},
        "server": {"command": b.command(), "ready_timeout": 30},
    })  # fmt: skip
    raw = {
        "alias bomb": f"{_bomb()}\n{head}checks: [{{type: canary, extra_body: {{x: *a8}}}}]\n",
        "a value that holds itself": f"{head}checks: [{{type: canary, "
        "chat_template_kwargs: &me {{self: [*me]}}}}]\n",
        "4,400-digit integer": f"{head}search: {{max_probes: {'9' * 4400}}}\n",
        "NUL byte": f'{head}probe: {{engine_cache: {{dir: "/tmp/a\\0b"}}}}\n',
        "engine_cache.dir a file": f"{head}probe: {{engine_cache: {{dir: {b.work / 'afile'}}}}}\n",
    }
    (b.work / "afile").write_text("not a folder")
    gsm = "model_name: x\nnum_questions: 5\nnum_fewshot: 5\n"
    evals = {
        "eval .nan threshold": (gsm + "accuracy_threshold: .nan\n", False),
        "eval .inf wait": (
            gsm + "accuracy_threshold: 0.5\nstartup_max_wait_seconds: .inf\n", False),
        "eval 400-digit wait": (
            gsm + f"accuracy_threshold: 0.5\nstartup_max_wait_seconds: {'9' * 400}\n", False),
        "eval unbalanced quote": (
            gsm + "accuracy_threshold: 0.5\nserver_args: \"--a 'b\"\n", False),
        "eval rtol .nan": ("model_name: x\nrtol: .nan\ntasks: [{name: t, metrics: "
                           "[{name: acc, value: 0.5}]}]\n", False),
        "eval JSON in server_args": (gsm + "accuracy_threshold: 0.5\nserver_args: >-\n"
                                     "  --speculative-config '{\"method\":\"mtp\"}'\n", True),
        "eval gen_kwargs a string": ("model_name: x\ngen_kwargs: 'temperature=0,until=<|E|>'\n"
                                     "tasks: [{name: t, metrics: [{name: acc, value: 0.5}]}]\n",
                                     True),
    }  # fmt: skip
    cases: list[tuple[str, list[str], dict[str, str], bool]] = []
    fake = b.work / "lm-eval-python"
    fake.write_text(FAKE_LM_EVAL.format(python=sys.executable))
    fake.chmod(0o755)
    for name, text in raw.items():
        path = b.work / f"raw-{len(cases)}.yaml"
        path.write_text(text)
        cases.append((f"yaml {name}", ["candidates", str(path)], {}, False))
    for name, (text, fine) in evals.items():
        path = b.work / f"eval-{len(cases)}.yaml"
        path.write_text(text)
        config = b.config(checks=[{"type": "vllm-eval", "path": str(path), "python": str(fake)}])
        cases.append((name, ["candidates", str(config)], {}, fine))
    lm = b.config(checks=[{"type": "lm_eval", "tasks": ["t"], "python": str(fake),
                           "thresholds": {"t": {"acc,none": 0.5}}}])  # fmt: skip
    good = '{"doc_id": 0, "filter": "none", "metrics": ["acc"], "acc": 1}\n'
    outputs = {
        "results not JSON": (good, "{broken"),
        "results a list": (good, '{"results": [1]}'),
        "sample without doc_id": ('{"filter": "none", "metrics": ["acc"], "acc": 1}\n', "{}"),
        "doc_id not an integer": ('{"doc_id": "7", "metrics": ["acc"], "acc": 1}\n', "{}"),
    }
    for name, (samples, results) in outputs.items():
        env = {"FAKE_SAMPLES": samples, "FAKE_RESULTS": results}
        cases.append((f"lm-eval {name}", ["check", str(lm), "--candidate", b.shas[1]], env, False))
    root = b.config(checks=[{"type": "lm_eval", "tasks": ["t"], "python": str(fake),
                             "include_path": "/"}])  # fmt: skip
    cases.append(("include_path /", ["candidates", str(root)], {}, False))
    sha256 = b.work / "sha256"
    subprocess.run(["git", "init", "-q", "--object-format=sha256", str(sha256)], check=True)
    subprocess.run(["git", "-C", str(sha256), "-c", "user.name=a", "-c", "user.email=a@b",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    other = b.work / "sha256.yaml"
    ends = {"repo": str(sha256), "good": "HEAD", "bad": "HEAD"}
    other.write_text(yaml.safe_dump({"candidates": ends, "server": {"command": b.command()}}))
    cases.append(("a SHA-256 repository", ["candidates", str(other)], {}, False))
    return cases


def judge(
    outcomes: Counter[str], name: str, code: int | None, output: str, usage: int, started: bool
) -> None:
    lines = output.strip().splitlines()
    if code is None:
        kind = "hang (killed at 120 s)"
    elif "Traceback" in output or "MemoryError" in output:
        kind = "traceback"
    elif started:
        kind = "started a server"
    elif code == usage and len(lines) == 1 and lines[0].startswith("llm-bisect: error: "):
        kind = "one line" + (" (stray colon)" if "error: :" in lines[0] else "")
    else:
        kind = f"exit {code}, {len(lines)} lines"
    outcomes[kind] += 1
    if kind != "one line":
        print(f"    {name}: {kind}: {lines[-1][:140] if lines else ''}")


def main() -> None:
    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="llm-bisect-inputs-") as tmp:
        b = Bench(Path(tmp))
        for name, args in golden_cases(b):
            code, output = cli(*args)
            judge(outcomes, name, code, output, USAGE.get(args[0], 2), b.started())
            b.launches.unlink(missing_ok=True)
        for name, over in config_cases(b):
            config = b.config(**over)
            for command in ("check", "run"):
                args = (
                    ["--candidate", b.shas[1]]
                    if command == "check"
                    else ["--out", str(b.work / "o")]
                )
                code, output = cli(command, str(config), *args)
                judge(
                    outcomes, f"{name}: {command}", code, output, USAGE.get(command, 2), b.started()
                )
                b.launches.unlink(missing_ok=True)
        for name, make, where in file_cases(b):
            b.n += 1
            path = b.work / f"file-{b.n}{'.parquet' if 'parquet' in where else ''}"
            make(path)
            if where == "config":
                args = ["candidates", str(path)]
            elif where == "golden":
                args = [
                    "check",
                    str(b.config(checks=[{"type": "logprobs"}])),
                    "--candidate",
                    b.shas[1],
                    "--golden",
                    str(path),
                ]
            else:
                args = ["candidates", str(b.config(checks=[{"type": "eval", "path": str(path)}]))]
            code, output = cli(*args)
            judge(outcomes, name, code, output, USAGE.get(args[0], 2), b.started())
            b.launches.unlink(missing_ok=True)
        for name, args, extra, fine in newer_cases(b):
            code, output = cli(*args, env={**os.environ, **extra})
            if fine and code == 0:
                outcomes["read as meant"] += 1
            else:  # lm-eval runs against a server: its output is read after one started
                harness = name.startswith("lm-eval")
                started = b.started() and not harness
                if harness:  # the probe's progress lines, then the error
                    output = "\n".join(x for x in output.splitlines() if not x.startswith("["))
                judge(outcomes, name, code, output, USAGE.get(args[0], 2), started)
            b.launches.unlink(missing_ok=True)
        localized = str(b.config())
        for good, bad in ((b.shas[1], b.shas[1]), (b.shas[1], b.shas[1][:9]), ("HEAD", b.shas[-1])):
            code, output = cli("localize", localized, "--good", good, "--bad", bad)
            judge(outcomes, f"localize {good[:9]} {bad[:9]}", code, output, 2, b.started())
            b.launches.unlink(missing_ok=True)
    print(f"bad inputs: {sum(outcomes.values())} tried")
    for kind, count in outcomes.most_common():
        print(f"  {count:4d}  {kind}")
    hangs = outcomes["hang (killed at 120 s)"]
    print(f"  tracebacks: {outcomes['traceback']}  hangs: {hangs}")


if __name__ == "__main__":
    main()
