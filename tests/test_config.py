"""Config validation: one line naming the key and the value, exit 2, nothing started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import live_processes, write_config
from llm_bisect.cli import cli
from llm_bisect.config import (
    CanaryConfig,
    EvalConfig,
    ExpectConfig,
    LogprobsConfig,
    expand_env,
    parse_config,
)
from llm_bisect.errors import ConfigError


def base() -> dict[str, Any]:
    return {
        "candidates": {"repo": ".", "good": "a", "bad": "b"},
        "server": {"command": ["serve", "--port", "{port}", "--commit", "{commit}"]},
    }


def test_a_minimal_config_gets_the_default_checks() -> None:
    config = parse_config(base())
    assert [type(c) for c in config.checks] == [
        CanaryConfig,
        ExpectConfig,
        LogprobsConfig,
        EvalConfig,
    ]
    assert config.server.ready_timeout == 600
    assert config.probe.repeats == 1


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"candidates": {"repo": ".", "good": "a", "bad": "b", "goood": "x"}},
            "candidates.goood: unknown key",
        ),
        ({"extra": 1}, "extra: unknown key"),
        ({"candidates": {"repo": ".", "good": "a"}}, "candidates.bad: required key is missing"),
        (
            {"server": {"command": "serve --port {port}"}},
            "server.command: Input should be a valid list",
        ),
        (
            {"server": {"command": ["serve", "{prot}"]}},
            "server.command: unknown placeholder '{prot}'",
        ),
        (
            {"server": {"command": ["x"], "ready_timeout": "soon"}},
            "server.ready_timeout: Input should be a valid number, got 'soon'",
        ),
        (
            {"server": {"command": ["x"], "ready_timeout": -1}},
            "server.ready_timeout: Input should be greater than 0, got -1",
        ),
        (
            {"server": {"command": ["x"], "launcher": "slurm"}},
            "server.launcher: unknown launcher 'slurm' (known: process, docker)",
        ),
        (
            {"checks": [{"type": "vibes"}]},
            "checks.0: unknown check type 'vibes' (known: canary, expect, logprobs, eval)",
        ),
        ({"checks": [{"prompts": ["hi"]}]}, "checks.0: a check needs a 'type'"),
        ({"checks": [{"type": "canary", "prompt": ["hi"]}]}, "checks.0.prompt: unknown key"),
        (
            {"checks": [{"type": "expect", "cases": [{"prompt": "p", "match": "(4"}]}]},
            "checks.0.cases.0.match: not a regular expression",
        ),
        (
            {"probe": {"repeats": 0}},
            "probe.repeats: Input should be greater than or equal to 1, got 0",
        ),
    ],
)
def test_errors_name_the_key(patch: dict[str, Any], message: str) -> None:
    data = {**base(), **patch}
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_env_expands_from_the_caller_and_names_a_missing_variable() -> None:
    assert expand_env({"HF_TOKEN": "${TOKEN}", "A": "x${B}y"}, {"TOKEN": "s3cret", "B": "-"}) == {
        "HF_TOKEN": "s3cret",
        "A": "x-y",
    }
    with pytest.raises(ConfigError, match=r"server.env.HF_TOKEN: \$\{TOKEN\} is not set"):
        expand_env({"HF_TOKEN": "${TOKEN}"}, {})


def _cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("command", ["run", "candidates"])
def test_cli_bad_input_is_one_line_exit_2_and_starts_nothing(
    tmp_path: Path, command: str, history: Any
) -> None:
    h = history({}, n=4)
    cases = [
        (h.config(good="nightly-0809"), "candidates.good: no such ref 'nightly-0809'"),
        (h.config(bad="--all"), "candidates.bad: no such ref '--all'"),
        (
            write_config(
                tmp_path / "norepo.yaml",
                {**base(), "candidates": {"repo": "nope", "good": "a", "bad": "b"}},
            ),
            "candidates.repo: not a git repository",
        ),
        (h.config(server={"env": {"HF_TOKEN": "${LLM_BISECT_UNSET_VAR}"}}), "server.env.HF_TOKEN"),
        (h.config(bad=h.shas[1], good=h.shas[3]), "candidates.bad: bad"),
    ]
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("candidates: [unclosed\n")
    cases.append((bad_yaml, "not valid YAML at line"))
    cases.append((tmp_path / "missing.yaml", "cannot read config"))
    for config, message in cases:
        code, output = _cli(
            tmp_path,
            command,
            str(config),
            *(["--out", str(tmp_path / "o")] if command == "run" else []),
        )
        assert code == 2, output
        lines = output.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], output
        assert "Traceback" not in output
    assert live_processes(str(h.repo)) == []
    assert not (tmp_path / "o" / "journal.jsonl").exists()


def test_the_older_bad_end_suggests_find_fix(tmp_path: Path, history: Any) -> None:
    h = history({}, n=4)
    code, output = _cli(tmp_path, "candidates", str(h.config(good=h.shas[3], bad=h.shas[1])))
    assert code == 2
    assert "is older than good" in output and "--find-fix" in output


def test_every_command_has_help() -> None:
    for command in ["run", "check", "golden", "calibrate", "candidates", "report", "demo"]:
        result = CliRunner().invoke(cli, [command, "--help"])
        assert result.exit_code == 0, command
        assert "Usage" in result.output
