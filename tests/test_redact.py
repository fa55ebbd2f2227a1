"""Masking: whole texts, streams cut anywhere, credentials in URLs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from hypothesis import given, strategies as st

from helpers import History, cli_bounded, github_render
from llm_bisect import guard
from llm_bisect.config import shared_config
from llm_bisect.redact import Masker, Scrub, public_url, redact, url_credentials
from llm_bisect.secretnames import argv_secret_names

SECRETS = st.lists(st.text("ab1:", min_size=1, max_size=6), max_size=3)
TEXT = st.text("ab1:x\n", max_size=80)


def streamed(text: str, secrets: list[str], cuts: list[int]) -> str:
    masker = Masker(secrets)
    data, out, at = text.encode(), b"", 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        out += masker.feed(data[at:cut])
        at = max(at, cut)
    out += masker.feed(data[at:]) + masker.flush()
    return out.decode()


@given(TEXT, SECRETS, st.lists(st.integers(min_value=0), max_size=8))
def test_a_stream_cut_anywhere_is_masked_as_the_whole_text(
    text: str, secrets: list[str], cuts: list[int]
) -> None:
    assert streamed(text, secrets, cuts) == redact(text, secrets)


@given(TEXT, SECRETS)
def test_no_secret_of_four_or_more_characters_survives(text: str, secrets: list[str]) -> None:
    masked = redact(text, secrets)
    for secret in secrets:
        if len(secret) >= 4:
            assert secret not in masked.replace("***", "\0")


def test_a_secret_split_across_pieces_is_masked() -> None:
    masker = Masker(["hf_secretToken"])
    out = masker.feed(b"x" * 16380 + b"HF_TOKEN=hf_sec") + masker.feed(b"retToken\nnext\n")
    assert out + masker.flush() == b"x" * 16380 + b"HF_TOKEN=***\nnext\n"


def test_short_values_are_never_masked() -> None:
    masker = Masker(["1", "no"])
    assert masker.feed(b"version 0.1.0, no") + masker.flush() == b"version 0.1.0, no"
    assert redact("version 0.1.0", ["1"]) == "version 0.1.0"
    assert Scrub().with_secrets(["1", "hf_longtoken"]).secrets == ("hf_longtoken",)


def test_overlapping_secrets_show_no_piece_of_either() -> None:
    assert redact("xabcdefg", ["bcdefg", "abcd"]) == "x***"


def test_credentials_in_a_url_are_secrets_and_hidden_from_its_public_form() -> None:
    url = "https://ci-bot:p%40ss-w0rd@wheels.example.com:8443/abc/cpu/"
    assert set(url_credentials(url)) >= {"p%40ss-w0rd", "p@ss-w0rd", "ci-bot:p%40ss-w0rd"}
    assert "ci-bot" not in url_credentials(url)  # a user with a password is not masked alone
    assert public_url(url) == "https://***@wheels.example.com:8443/abc/cpu/"
    assert url_credentials("https://tok3n-abc@h/x/") == ["tok3n-abc"]
    assert url_credentials("https://h/x/") == [] and public_url("https://h/x/") == "https://h/x/"


@given(
    st.lists(
        st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12), max_size=5
    )
)
def test_a_command_line_with_named_secrets_runs_as_written_from_the_readers_variables(
    words: list[str],
) -> None:
    """Whatever the words around them (quotes included), `sh` reads the line back as the
    command with each secret taken from its variable; nothing of a secret is in the line."""
    argv = ["serve", *words, "--api-key", "k3y'\"x", "--otlp", "https://u:T0KEN@h/", *words]
    names = argv_secret_names(argv)
    assert names["k3y'\"x"] == "LLM_BISECT_API_KEY"
    assert names["u:T0KEN"] == "LLM_BISECT_OTLP_LOGIN"
    scrub = Scrub().with_secrets(names, names)
    line = scrub.shell(shlex.join(argv))
    assert "T0KEN" not in line and "k3y" not in line
    env = {"LLM_BISECT_API_KEY": "k3y'\"x", "LLM_BISECT_OTLP_LOGIN": "u:T0KEN", "PATH": "/bin"}
    done = subprocess.run(["sh", "-c", "printf '%s\\0' " + line], env=env, capture_output=True)
    assert done.stdout.decode().split("\0")[:-1] == argv


def test_a_secret_without_a_variable_is_masked_in_a_command_line() -> None:
    scrub = Scrub().with_secrets(["hunter2hunter"])
    assert scrub.shell("serve --pw 'a hunter2hunter b'") == "serve --pw 'a *** b'"
    assert scrub.doc({"command": "x 'hunter2hunter'"}) == {"command": "x '***'"}


SECRETS = ("TOKEN1234abc", "s3cr3tkeyXYZ", "fastsecretVALUE9", "buildKEYzz99", "BUILDTOK77")


def test_no_secret_of_a_command_line_reaches_any_output_and_the_printed_one_still_runs(
    tmp_path: Path, history: Callable[..., History]
) -> None:
    """A URL login and an `--api-key` in the server's argv, a secret in `probe.fast.env` and
    in a build command's argv once reached report.md's Reproduce block, result.json,
    golden.json, the journal, build logs, BUILD.json and the terminal."""
    h = history({5: "garbled-math"}, n=8)
    endpoint = "https://u:TOKEN1234abc@host/x"
    config = h.config(
        server={"command": [*h.config_command(), "--otlp-traces-endpoint", endpoint,
                            "--api-key", "s3cr3tkeyXYZ"]},
        probe={"fast": {"env": {"MY_SECRET_TOKEN": "fastsecretVALUE9"}}},
        build={"cache": {"dir": str(tmp_path / "cache")}, "strategies": [
            {"type": "command", "run": ["true", "--api-key", "buildKEYzz99",
                                        "https://bu:BUILDTOK77@h/"]}]},
    )  # fmt: skip
    out = tmp_path / "out"
    code, said = cli_bounded("run", str(config), "--out", str(out))
    assert code == 0 and f"found: {h.shas[5]}" in said, said
    code, listed = cli_bounded("candidates", str(config))
    assert code == 0, listed
    for text in (said, listed):
        assert not [s for s in SECRETS if s in text]
    written = [p for root in (out, tmp_path / "cache") for p in root.rglob("*") if p.is_file()]
    assert len(written) > 20
    leaked = [(p, s) for p in written for s in SECRETS if s.encode() in p.read_bytes()]
    assert not leaked, leaked
    report = (out / "report.md").read_text()
    (embedded,) = [c for info, c in github_render(report).fences if info == "yaml"]
    shared = yaml.safe_load(embedded)  # the config as report.md holds it: it still loads
    assert shared["probe"]["fast"]["env"] == {"MY_SECRET_TOKEN": "${MY_SECRET_TOKEN}"}
    assert "***" in shared["server"]["command"]
    shell = [c for info, c in github_render(report).fences if info == "bash"]
    (line,) = [x for c in shell for x in c.splitlines() if "--otlp-traces-endpoint" in x]
    env = {**os.environ, "LLM_BISECT_OTLP_TRACES_ENDPOINT_LOGIN": "u:TOKEN1234abc",
           "LLM_BISECT_API_KEY": "s3cr3tkeyXYZ"}  # fmt: skip
    done = subprocess.run(["sh", "-c", "printf '%s\\0' " + line], env=env, capture_output=True)
    words = done.stdout.decode().split("\0")[:-1]
    assert words[words.index("--otlp-traces-endpoint") + 1] == endpoint
    assert words[words.index("--api-key") + 1] == "s3cr3tkeyXYZ"


def test_the_guard_masks_the_values_it_is_given_and_keeps_them_from_the_child() -> None:
    script = "import os, sys; print(sys.argv[1], os.environ.get('LLM_BISECT_GUARD_SECRETS'))"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-I",
            guard.__file__,
            "1",
            "--",
            sys.executable,
            "-c",
            script,
            "the key is 9f8e7d6c5b",
        ],
        env={guard.SECRETS_VAR: json.dumps(["9f8e7d6c5b"])},
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )  # fmt: skip  (stdin open: the guard ends its child at EOF)
    assert proc.stdout is not None
    said = proc.stdout.read()
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait() == 0
    assert said.strip() == "the key is *** None"


def test_the_guard_passes_at_most_its_cap_and_says_it_cut() -> None:
    """collect_env's output is capped this way (a chatty one once wrote 50 MB)."""
    script = "import sys\nfor _ in range(5000): print('x' * 99)"
    proc = subprocess.Popen(
        [sys.executable, "-I", guard.__file__, "1", "--cap", "1000", "--", sys.executable,
         "-c", script], stdout=subprocess.PIPE, stdin=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    out = proc.stdout.read()
    proc.stdin.close()
    assert proc.wait() == 0  # the child wrote all it wanted: the rest was read and dropped
    assert out.startswith(b"x" * 99 + b"\n") and out.endswith(
        b"[llm-bisect: output cut at 1000 bytes]\n"
    )
    assert len(out) < 1100


def test_a_secret_with_a_brace_is_masked_as_the_server_gets_it() -> None:
    """`{{` in a template is `{` once filled: the filled command once showed the key."""
    names = argv_secret_names(["serve", "--api-key", "k{{9Zx-77q}}", "u", "https://a:AAAA1111@h/",
                               "https://b:BBBB2222@h/"])  # fmt: skip
    scrub = Scrub().with_secrets(names, names)
    assert "9Zx" not in scrub.doc({"command": "serve --api-key 'k{9Zx-77q}'"})["command"]
    assert names["a:AAAA1111"] != names["b:BBBB2222"]  # each login its own variable


def test_a_config_is_shared_with_secret_variables_by_name_and_other_secrets_masked() -> None:
    """What report.md embeds of a config: a variable named like a secret takes the reader's
    own (`${HF_TOKEN}`), one already taken from the environment stays so, any other secret
    (a flag's value, a login in an address) is masked; ordinary values stay; YAML that loads."""
    scrub = Scrub().with_secrets(["hf_literal1234", "flagvalue99", "proxyPass9876"])
    data = {
        "server": {
            "command": ["serve", "--api-key", "flagvalue99", "--port", "{port}"],
            "env": {"HF_TOKEN": "hf_literal1234", "API_KEY": "${MY_KEY}", "NCCL_X": "1",
                    "HTTPS_PROXY": "http://bob:proxyPass9876@proxy:3128"},
        },
        "probe": {"fast": {"env": {"WANDB_API_KEY": "abc"}}},
    }  # fmt: skip
    shared = shared_config(data, scrub)
    assert shared == {
        "server": {
            "command": ["serve", "--api-key", "***", "--port", "{port}"],
            "env": {"HF_TOKEN": "${HF_TOKEN}", "API_KEY": "${MY_KEY}", "NCCL_X": "1",
                    "HTTPS_PROXY": "http://bob:***@proxy:3128"},
        },
        "probe": {"fast": {"env": {"WANDB_API_KEY": "${WANDB_API_KEY}"}}},
    }  # fmt: skip
    assert yaml.safe_load(yaml.safe_dump(shared)) == shared
