"""Config validation: one line naming the key and the value, exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import cli_bounded, live_processes, write_config
from llm_bisect.checks.canary import CanaryConfig
from llm_bisect.checks.eval import EvalConfig
from llm_bisect.checks.expect import ExpectConfig
from llm_bisect.checks.logprobs import LogprobsConfig
from llm_bisect.cli import cli
from llm_bisect.config import (
    SearchConfig,
    check_digest,
    config_digest,
    differing,
    parse_config,
    server_digest,
    server_environment,
    setting_digests,
)
from llm_bisect.errors import ConfigError
from llm_bisect.services.setup import cache_mounted, fast_section, with_engine_cache
from llm_bisect.templates import expand_env
from llm_bisect.yamlfile import MAX_CONFIG_BYTES


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
    # one run of the checks a probe; a verdict that contradicts a neighbour's is probed again
    assert config.probe.repeats == "auto" and config.probe.runs == 1 and config.probe.reprobe
    fixed = parse_config({**base(), "probe": {"repeats": 3}}).probe
    assert (fixed.runs, fixed.reprobe) == (3, False)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"candidates": {"repo": ".", "good": "a", "bad": "b", "goood": "x"}},
            "candidates.goood: unknown key",
        ),
        ({"extra": 1}, "extra: unknown key"),
        ({"search": {"flake": 0.7}}, "search.flake: a lie rate is at least 0 and below 0.5"),
        ({"search": {"max_probes": 1}}, "search.max_probes: a number of probes from 2 to 10000"),
        ({"search": {"flake": "sometimes"}}, "search.flake: a lie rate (0 to 0.5) or auto"),
        ({"search": {"confidence": 1}}, "search.confidence: Input should be less than 1"),
        ({"search": {"max_probes": "lots"}}, "search.max_probes: a number of probes or auto"),
        ({"search": {"symptom": "similar"}}, "search.symptom: Input should be 'any' or 'same'"),
        (
            {"probe": {"fast": {}}},
            "probe.fast: give args or env: a fast setup that adds nothing is the full one",
        ),
        ({"probe": {"fast": {"args": "--enforce-eager"}}}, "probe.fast.args: Input should be"),
        (
            {"candidates": {"repo": ".", "good": "a", "bad": "b", "url": "javascript:alert(1)//"}},
            "candidates.url: not an http(s) address of a repository: 'javascript:alert(1)//'",
        ),
        (
            {"candidates": {"repo": ".", "good": "a", "bad": "b", "url": 'https://x/r"><img>'}},
            "candidates.url: not an http(s) address of a repository: 'https://x/r\"><img>'",
        ),
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
            {"server": {"command": ["serve", "--hf-overrides", '{"rms_norm_eps": 0.1}']}},
            """server.command: '{"rms_norm_eps": 0.1}' is read as a placeholder: write a literal """
            """brace twice ('{{"rms_norm_eps": 0.1}}')""",
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
            {"server": {"command": ["x"], "launcher": "nomad"}},
            "server.launcher: unknown launcher 'nomad' (known: process, docker, slurm, kubernetes)",
        ),
        (
            {"checks": [{"type": "vibes"}]},
            "checks.0: unknown check type 'vibes' (known: canary, expect, logprobs, eval, "
            "lm_eval, vllm-eval)",
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
        (
            {"probe": {"repeats": "twice"}},
            "probe.repeats: a number of runs (1 to 10) or auto, got 'twice'",
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
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(h.config().read_bytes() + b"# caf\xe9\n")
    cases.append((latin, "not UTF-8 text (byte"))
    cases += [
        (h.config(server={"ready_timeout": float("inf")}), "server.ready_timeout: Input should"),
        (
            h.config(checks=[{"type": "canary", "max_tokens": 10**12}]),
            "checks.0.max_tokens: Input should be less than or equal to 1048576",
        ),
        (
            h.config(server={"command": ["/nonexistent/vllm-serve", "{port}"]}),
            "server.command.0: no executable file '/nonexistent/vllm-serve'",
        ),
        (
            h.config(server={"command": ["no-such-server-xyz", "{port}"]}),
            "server.command.0: 'no-such-server-xyz' is not on PATH",
        ),
    ]
    for name, text, message in [
        ("rows.jsonl", "[1, 2]\n", "line 1: not a JSON object"),
        ("empty.jsonl", "\n", "holds no problems"),
        ("half.jsonl", '{"question": "q"}\n', "line 1: needs 'question' and 'answer' strings"),
    ]:
        (tmp_path / name).write_text(text)
        cases.append((h.config(checks=[{"type": "eval", "path": str(tmp_path / name)}]), message))
    shaped = tmp_path / "shaped.json"
    shaped.write_text(
        '{"version": 2, "commit": "' + h.shas[0] + '", "checks": {"eval": {"n": "many"}}}'
    )
    cases.append((h.config(golden=str(shaped)), "golden: '" + str(shaped) + "' checks.eval.n"))
    flat = tmp_path / "flat.json"
    flat.write_text("[1, 2, 3]")
    cases.append((h.config(golden=str(flat)), "is not an llm-bisect golden"))
    if command == "run":
        other = tmp_path / "other.json"
        other.write_text(
            '{"version": 2, "commit": "' + h.shas[1] + '", "checks": {}, "calibration": null}'
        )
        cases.append((h.config(golden=str(other)), f"was recorded from {h.shas[1][:12]}"))
        blocker = tmp_path / "a-file"
        blocker.write_text("")
    for config, message in cases:
        out = tmp_path / "o"
        if command == "run" and message.endswith("'--out'"):
            out = tmp_path / "a-file" / "o"
        code, output = _cli(
            tmp_path,
            command,
            str(config),
            *(["--out", str(out)] if command == "run" else []),
        )
        assert code == 2, output
        lines = output.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], output
        assert "Traceback" not in output
    assert live_processes(str(h.repo)) == []
    assert not (tmp_path / "o" / "journal.jsonl").exists()


def test_an_out_folder_that_cannot_be_made_is_one_line(tmp_path: Path, history: Any) -> None:
    h = history({}, n=4)
    (tmp_path / "a-file").write_text("")
    code, output = _cli(tmp_path, "run", str(h.config()), "--out", str(tmp_path / "a-file" / "o"))
    assert code == 2, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: --out: cannot make folder '{tmp_path / 'a-file' / 'o'}' "
        "(Not a directory)"
    ]
    assert live_processes(str(h.repo)) == []


def test_a_subject_with_control_characters_is_shown_not_obeyed(
    tmp_path: Path, history: Any
) -> None:
    h = history({3: "null-content"}, n=5, subjects={3: "evil\x1b[2J\x1f\rsubject (#1)"})
    code, output = _cli(tmp_path, "run", str(h.config()), "--out", str(tmp_path / "o"))
    assert code == 0, output
    assert f"found: {h.shas[3]} evil\\x1b[2J\\x1f\\rsubject (#1)" in output
    assert "\x1b" not in output and "\r" not in output


def test_the_older_bad_end_suggests_find_fix(tmp_path: Path, history: Any) -> None:
    h = history({}, n=4)
    code, output = _cli(tmp_path, "candidates", str(h.config(good=h.shas[3], bad=h.shas[1])))
    assert code == 2
    assert "is older than good" in output and "--find-fix" in output


def test_every_command_has_help_with_an_example_and_flags_that_take_no_value() -> None:
    import typer.main

    commands = sorted(typer.main.get_command(cli).commands)  # type: ignore[attr-defined]
    assert {"run", "check", "gate", "init", "candidates", "demo"} <= set(commands)
    for command in commands:
        result = CliRunner().invoke(cli, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, command
        assert "Usage" in result.output and "Example: llm-bisect " in result.output.replace(
            "git bisect run ", ""
        ), command
        # a flag (--json, --find-fix) is shown without a value type: typer said `<bool>`
        assert "<bool>" not in result.output, command


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"checks": [{"type": "canary", "extra_body": {"x": float("nan")}}]},
            "checks.0.extra_body: not JSON: x is nan (only finite numbers)",
        ),
        (
            {"checks": [{"type": "expect", "extra_body": {"x": [1, {"y": float("inf")}]}}]},
            "checks.0.extra_body: not JSON: x.1.y is inf (only finite numbers)",
        ),
        (
            {"checks": [{"type": "canary", "chat_template_kwargs": {"when": b"\x00"}}]},
            "checks.0.chat_template_kwargs: not JSON: when is bytes",
        ),
        (
            {"checks": [{"type": "eval", "dataset_config": "main"}]},
            "checks.0.dataset_config: goes with `dataset`, and no dataset is given",
        ),
        (
            {
                "server": {"launcher": "docker", "image": "x:{commit}"},
                "localize": {"save_tensors": True},
            },
            "localize.save_tensors: the process launcher's only",
        ),
        (
            {"server": {"launcher": "slurm", "command": ["x"], "host": "{nodex}"}},
            "server.host: unknown placeholder '{nodex}' (known: {node})",
        ),
        (
            {"server": {"launcher": "slurm", "command": ["x"], "host": "{node"}},
            "server.host: malformed template '{node'",
        ),
        (
            {"server": {"launcher": "slurm", "command": ["x"], "host": "{commit}"}},
            "server.host: unknown placeholder '{commit}' (known: {node})",
        ),
        (
            {"server": {"command": ["serve", "{port:d}"]}},
            "server.command: placeholder '{port:d}' takes no conversion or format",
        ),
    ],
)
def test_values_that_would_fail_later_are_one_line_at_load(
    patch: dict[str, Any], message: str
) -> None:
    """extra_body that is not JSON, a dataset_config without its dataset, a Slurm host template
    that only fails once a job runs: one line naming the key when the config is read, and
    never a stray colon where a check spans the whole config."""
    with pytest.raises(ConfigError) as err:
        parse_config({**base(), **patch})
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_config_that_is_not_a_regular_file_or_is_huge_is_one_line(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO with no writer used to hang the read forever, /dev/zero to grow until killed."""
    config = tmp_path / "config.yaml"
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "device":
        config.symlink_to("/dev/zero")
    else:
        with config.open("wb") as f:
            f.truncate(MAX_CONFIG_BYTES + 1)
    code, output = cli_bounded("candidates", str(config))
    assert code == 2, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: {config}: "
        + (
            f"cannot read config (over {MAX_CONFIG_BYTES} bytes)"
            if kind == "huge"
            else f"cannot read config (not a regular file: a {kind})"
        )
    ]


def test_a_golden_is_stale_when_what_shapes_its_outputs_changes_only() -> None:
    """The digests a golden records: the server command and environment (a secret's value
    not), and each check's prompts and budgets count; thresholds, timeouts and hosts don't."""

    def server(**over: Any) -> str:
        config = parse_config({**base(), "server": {**base()["server"], **over}})
        return server_digest(config.server)

    def check(**over: Any) -> str:
        config = parse_config({**base(), "checks": [{"type": "logprobs", **over}]})
        return check_digest(config.checks[0])

    assert server() == server(ready_timeout=5, request_timeout=9, max_reply_mb=1)
    assert server(env={"HF_TOKEN": "hf_one"}) == server(env={"HF_TOKEN": "hf_two"})
    backend = "VLLM_ATTENTION_BACKEND"
    assert server(env={backend: "FLASH_ATTN"}) != server(env={backend: "TRITON_ATTN"})
    assert server() != server(command=["serve", "--port", "{port}"])
    assert server() == server(model="m")  # the model is recorded apart
    assert check() == check(max_abs_delta=0.5, top_k=5, teacher_mean_abs_delta=1.0)
    assert check() != check(prompts=["Say hi."]) != check(max_tokens=8)
    assert check() != check(extra_body={"reasoning_effort": "low"})


def test_the_config_schema_is_published_and_explains_every_key() -> None:
    """schemas/config.schema.json is what `llm-bisect schema` prints, and every key in it has
    a description (an editor with the YAML language server shows it on hover)."""
    import json

    shipped = Path(__file__).parent.parent / "schemas" / "config.schema.json"
    assert shipped.exists(), "publish it: llm-bisect schema > schemas/config.schema.json"
    printed = CliRunner().invoke(cli, ["schema"]).output
    assert json.loads(shipped.read_text()) == json.loads(printed), (
        "regenerate schemas/config.schema.json with `llm-bisect schema`"
    )
    schema = json.loads(printed)
    models = {"Config": schema, **schema["$defs"]}
    bare = [
        f"{model}.{key}"
        for model, node in models.items()
        for key, prop in node.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert bare == []
    assert "`docker`" in models["DockerServerConfig"]["properties"]["launcher"]["description"]


def test_fast_flags_go_after_every_command_of_the_server_and_its_variables_over_its_own() -> None:
    slurm = {
        "launcher": "slurm",  # its argument lists (LauncherKind.argv) get the flags
        "command": ["vllm", "serve", "m", "--max-model-len", "8192"],
        "worker_command": ["vllm", "serve", "m", "--headless"],
        "env": {"A": "1", "B": "2"},
    }
    made = fast_section(slurm, ["--enforce-eager", "--max-model-len", "2048"], {"B": "3"})
    assert made["command"][-4:] == ["8192", "--enforce-eager", "--max-model-len", "2048"]
    assert made["worker_command"] == [*slurm["worker_command"], "--enforce-eager",
                                      "--max-model-len", "2048"]  # fmt: skip
    assert made["env"] == {"A": "1", "B": "3"} and slurm["env"] == {"A": "1", "B": "2"}
    image = fast_section(
        {"launcher": "docker", "image": "vllm/vllm-openai:{commit}"}, ["--enforce-eager"], {}
    )
    assert image["args"] == ["--enforce-eager"] and "command" not in image


def test_the_engine_cache_is_one_root_every_kind_of_server_is_given(tmp_path: Path) -> None:
    cache = {"probe": {"engine_cache": {"dir": "cache"}}}
    root = tmp_path / "cache"
    made = with_engine_cache(parse_config({**base(), **cache}), {"A": "1"}, tmp_path)
    assert made is not None and made.root == root and made.place == "here"
    slot = root / "node-a" / "slot-1"  # one folder per node and slot: no two writers
    assert made.env("node-a", 1) == {
        "VLLM_CACHE_ROOT": f"{slot}/vllm",
        "TORCHINDUCTOR_CACHE_DIR": f"{slot}/inductor",
        "TRITON_CACHE_DIR": f"{slot}/triton",
        "FLASHINFER_WORKSPACE_BASE": f"{slot}/flashinfer",
        "DG_JIT_CACHE_DIR": f"{slot}/deep_gemm",
    }
    config = parse_config({**base(), **cache})
    mine = with_engine_cache(config, {"TRITON_CACHE_DIR": "/m"}, tmp_path)
    assert mine is not None and "TRITON_CACHE_DIR" not in mine.env("n", 0)  # the user's wins
    docker = {**base(), "server": {"launcher": "docker", "image": "v", "volumes": ["/m:/m"]}}
    made = with_engine_cache(parse_config({**docker, **cache}), {}, tmp_path)
    assert made is not None
    server = cache_mounted(parse_config(docker).server, made.root)
    assert server.volumes == ["/m:/m", f"{root}:{root}"]
    off = {"probe": {"engine_cache": {"dir": "cache", "enabled": False}}}
    assert with_engine_cache(parse_config({**docker, **off}), {"A": "1"}, tmp_path) is None
    # what a probe costs never makes a journal another config's
    plain = config_digest(parse_config(base()))
    assert config_digest(parse_config({**base(), **cache})) == plain
    assert config_digest(parse_config({**base(), "probe": {"engine_cache": False}})) == plain
    assert config_digest(parse_config({**base(), "probe": {"early_stop": False}})) == plain


def test_the_engine_cache_is_on_by_default_under_the_users_cache(tmp_path: Path) -> None:
    """It was off unless configured (every probe compiled from nothing); `false` turns it
    off; Kubernetes gets none unless the config names a folder its pods' nodes have."""
    home = {"HOME": str(tmp_path / "home")}
    made = with_engine_cache(parse_config(base()), {}, tmp_path, home)
    assert made is not None
    assert made.root == tmp_path / "home" / ".cache" / "llm-bisect" / "engine-cache"
    xdg = {**home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    made = with_engine_cache(parse_config(base()), {}, tmp_path, xdg)
    assert made is not None and made.root == tmp_path / "xdg" / "llm-bisect" / "engine-cache"
    relative = {**home, "XDG_CACHE_HOME": "xdg"}  # the XDG spec: a relative one is ignored
    made = with_engine_cache(parse_config(base()), {}, tmp_path, relative)
    assert made is not None and made.root.is_relative_to(tmp_path / "home")
    for off in (False, {"enabled": False}):
        config = parse_config({**base(), "probe": {"engine_cache": off}})
        assert with_engine_cache(config, {}, tmp_path, xdg) is None
    slurm = {"launcher": "slurm", "command": ["serve", "--port", "{port}"]}
    made = with_engine_cache(parse_config({**base(), "server": slurm}), {}, tmp_path, xdg)
    assert made is not None and made.place == "node"  # filled on the job's node
    assert made.env("{node}", 0)["VLLM_CACHE_ROOT"].endswith("/engine-cache/{node}/slot-0/vllm")
    pods = {"launcher": "kubernetes", "image": "v", "namespace": "ns"}
    assert with_engine_cache(parse_config({**base(), "server": pods}), {}, tmp_path, xdg) is None
    named = {"probe": {"engine_cache": {"dir": "/scratch/c"}}}  # a hostPath on every node
    made = with_engine_cache(parse_config({**base(), "server": pods, **named}), {}, tmp_path)
    assert made is not None and made.place == "configured"
    assert made.env("", 0)["VLLM_CACHE_ROOT"] == "/scratch/c/slot-0/vllm"
    mounted = cache_mounted(parse_config({**base(), "server": pods}).server, made.root)
    assert mounted.host_paths == ["/scratch/c:/scratch/c"]
    with pytest.raises(ConfigError, match=r"probe\.engine_cache"):
        parse_config({**base(), "probe": {"engine_cache": "yes"}})


def test_the_search_weighs_verdicts_and_never_makes_a_journal_another_config_s() -> None:
    assert parse_config(base()).search.policy == SearchConfig(flake="auto").policy  # default
    auto = parse_config({**base(), "search": {"max_probes": 40}}).search.policy
    assert (auto.flake, auto.confidence, auto.max_probes, auto.exact) == (None, 0.99, 40, False)
    assert parse_config({**base(), "search": {"flake": 0}}).search.policy.exact
    assert config_digest(parse_config({**base(), "search": {"flake": 0}})) == config_digest(
        parse_config(base())
    )
    # the journal keeps each probe as it tested: a resume counts them under the rule it has
    same = parse_config({**base(), "search": {"symptom": "same"}})
    assert same.search.symptom == "same" and parse_config(base()).search.symptom == "any"
    assert config_digest(same) == config_digest(parse_config(base()))


def test_search_batch_quantiles_warns_once_on_stderr_and_is_still_read(history: Any) -> None:
    """A deprecated option: `candidates` says so in one line on stderr, and goes on with it."""
    h = history({}, n=4)
    old = h.config(search={"flake": "auto", "batch": "quantiles"})
    said = CliRunner().invoke(cli, ["candidates", str(old)])
    warning = "llm-bisect: warning: search.batch: quantiles is deprecated (still read)"
    assert said.exit_code == 0, said.output
    assert [line for line in said.stderr.splitlines() if "deprecated" in line] == [
        f"{warning}; leave it out for joint"
    ]
    assert warning not in said.stdout
    assert parse_config({**base(), "search": {"batch": "quantiles"}}).search.policy.batch == (
        "quantiles"
    )
    quiet = CliRunner().invoke(cli, ["candidates", str(h.config(search={"flake": "auto"}))])
    assert quiet.exit_code == 0 and "deprecated" not in quiet.output, quiet.output


def _bomb(levels: int = 9) -> str:
    """A billion-laughs document: each alias list repeats the one before nine times."""
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines)


@pytest.mark.parametrize(
    "body",
    [
        "extra_body: {bomb: *a8}",  # 9 ** 8 = 43 million values from under 800 bytes
        "chat_template_kwargs: &me {self: [*me]}",  # a value that holds itself
    ],
)
def test_yaml_aliases_that_expand_without_end_are_one_line(tmp_path: Path, body: str) -> None:
    """A 784-byte alias bomb in checks[].extra_body once kept `candidates` running past 60 s
    (the JSON walk expands every alias). cli_bounded: a hang fails the test at 120 s."""
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    text = (
        f"{_bomb()}\ncandidates: {{repo: repo, good: a, bad: b}}\n"
        f"server: {{command: [serve, --port, '{{port}}']}}\n"
        f"checks:\n  - type: canary\n    {body}\n"
    )
    assert len(text.encode()) < 1200
    config = tmp_path / "c.yaml"
    config.write_text(text)
    code, said = cli_bounded("candidates", str(config))
    assert code == 2, said
    (line,) = said.strip().splitlines()
    assert "aliases (*name) expand past 200,000 values, or a value holds itself" in line, line


FAKE_LM_EVAL_PYTHON = "#!/bin/sh\nexit 0\n"  # says it has lm_eval; never asked more here


def _variant(tmp_path: Path, case: str) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    server = "server: {command: ['true', --port, '{port}']}\n"
    head = "candidates: {repo: repo, good: a, bad: b}\n"
    if case == "long integer":
        text = head + server + f"search: {{max_probes: {'9' * 4400}}}\n"
    elif case == "NUL in a path":
        text = head + server + 'probe: {engine_cache: {dir: "/tmp/ca\\0che"}}\n'
    elif case == "include_path /":
        fake = tmp_path / "python"
        fake.write_text(FAKE_LM_EVAL_PYTHON)
        fake.chmod(0o755)
        text = (
            head
            + server
            + (f"checks: [{{type: lm_eval, tasks: [t], include_path: /, python: '{fake}'}}]\n")
        )
    else:  # a SHA-256 repository
        repo = tmp_path / "sha256"
        subprocess.run(["git", "init", "-q", "--object-format=sha256", str(repo)], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b",
                        "commit", "-q", "--allow-empty", "-m", "x"], check=True)  # fmt: skip
        text = "candidates: {repo: sha256, good: HEAD, bad: HEAD}\n" + server
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("long integer", "a value YAML cannot hold (Exceeds the limit (4300 digits)"),
        ("NUL in a path", "probe.engine_cache.dir: holds a NUL byte"),
        ("include_path /", "checks.0.include_path: '/' holds more than 20,000 files"),
        ("SHA-256 repository", "is a SHA256 repository (git's objectformat)"),
    ],
)
def test_inputs_past_what_python_or_git_takes_are_one_line(
    tmp_path: Path, case: str, said: str
) -> None:
    """Each was a traceback (ValueError, OverflowError, a walk of /proc, a 64-digit id)."""
    code, output = cli_bounded("candidates", str(_variant(tmp_path, case)))
    assert code == 2, output
    (line,) = output.strip().splitlines()
    assert line.startswith("llm-bisect: error: ") and said in line, line


def test_the_engine_cache_dir_expands_variables_and_is_no_file(tmp_path: Path) -> None:
    """`${VAR}` there was taken as it is written, and a file was accepted as the folder."""
    cache = {"probe": {"engine_cache": {"dir": "${SCRATCH}/cache"}}}
    config = parse_config({**base(), **cache})
    made = with_engine_cache(config, {}, tmp_path, {"SCRATCH": str(tmp_path / "s")})
    assert made is not None and made.root == tmp_path / "s" / "cache"
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "cache").write_text("a file")
    with pytest.raises(ConfigError, match=r"probe.engine_cache.dir: '.*/s/cache' is a file"):
        with_engine_cache(config, {}, tmp_path, {"SCRATCH": str(tmp_path / "s")})
    with pytest.raises(ConfigError, match=r"\$\{SCRATCH\} is not set"):
        with_engine_cache(config, {}, tmp_path, {})


def test_batch_invariant_is_a_server_variable_and_part_of_the_digest() -> None:
    """It can change verdicts (logprobs move with the kernels): a run under it is another
    config's; off, it adds nothing and the digest is the one before the key existed."""
    on = parse_config({**base(), "probe": {"batch_invariant": True}})
    assert on.probe.server_env == {"VLLM_BATCH_INVARIANT": "1"}
    assert parse_config(base()).probe.server_env == {}
    assert config_digest(on) != config_digest(parse_config(base()))
    off = parse_config({**base(), "probe": {"batch_invariant": False}})
    assert config_digest(off) == config_digest(parse_config(base()))


def test_the_digest_leaves_out_where_and_how_long_but_counts_what_picks_the_hardware() -> None:
    """A Slurm account, retries, pending_timeout or ready_timeout changed resumes the run; a
    partition or server.env value changed is another config, and names its key."""
    slurm = {
        **base(),
        "server": {
            "launcher": "slurm",
            "command": ["serve", "--port", "{port}"],
            "partition": "gpu",
            "account": "team-a",
        },
    }
    plain = parse_config(slurm)
    for change in (
        {"account": "team-b"},
        {"retries": 3},
        {"pending_timeout": 60},
        {"ready_timeout": 1200},
    ):
        changed = parse_config({**slurm, "server": {**slurm["server"], **change}})
        assert config_digest(changed) == config_digest(plain), change
    other = parse_config({**slurm, "server": {**slurm["server"], "partition": "b300"}})
    assert differing(setting_digests(plain), setting_digests(other)) == ["server.partition"]
    moded = parse_config({**base(), "server": {**base()["server"], "env": {"MODE": "a"}}})
    a = server_environment(moded, {"MODE": "a"}, {"VLLM_X": "1", "HOME": "/h"})
    b = server_environment(moded, {"MODE": "b"}, {"VLLM_X": "1", "HOME": "/elsewhere"})
    assert a == {"MODE": "a", "VLLM_X": "1"}  # what the engine reads, not HOME
    assert differing(setting_digests(moded, a), setting_digests(moded, b)) == ["server.env.MODE"]
    # a secret counts by name: a rotated token resumes, and its value is never written
    token = parse_config({**base(), "server": {**base()["server"], "env": {"T": "${HF_TOKEN}"}}})
    one = server_environment(token, {"T": "hf_one"}, {"HF_TOKEN": "hf_one"})
    two = server_environment(token, {"T": "hf_two"}, {"HF_TOKEN": "hf_two"})
    assert config_digest(token, one) == config_digest(token, two)
    assert "hf_one" not in str(setting_digests(token, one))
