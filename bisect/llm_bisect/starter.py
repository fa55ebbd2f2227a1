"""`llm-bisect init`: a commented config from what the user has. Pure.

Two images (`--good IMAGE --bad IMAGE`) give a Docker bisection whose candidates are the
commits between the images' commits (each probe the commit's nightly image, else its own
wheel or an overlay); two commits or two vLLM wheels (their version names the commit,
`0.32.0+cu129.g1a2b3c4`) give a bisection of builds served as local processes. The serve
command after `--` (`vllm serve MODEL --tensor-parallel-size 8`) becomes the server's
arguments, with the port a placeholder and secrets read from the shell: a variable named
like one (`HF_TOKEN=...`: `${HF_TOKEN}`), the login in a variable's address
(`HTTPS_PROXY=http://user:pw@proxy:3128`: `http://${HTTPS_PROXY_LOGIN}@proxy:3128`).
Every value is written as a JSON string (a YAML scalar that nothing in it can break out of).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from .errors import ConfigError
from .redact import url_logins
from .registry import parse_image_ref
from .secretnames import argv_secrets, secret_names
from .templates import literal

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
_WHEEL_COMMIT = re.compile(r"\+(?:[a-z0-9]+\.)*g([0-9a-f]{7,40})(?:[.-]|$)")
_ENV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_DROPPED = {"--port", "--host"}
"""Flags llm-bisect sets itself (each probe's port; the address it reaches)."""


def is_image(ref: str) -> bool:
    """An image reference (`repo:tag`, `repo@sha256:...`): git refs cannot hold a colon."""
    return ":" in ref and not is_wheel(ref)


def is_wheel(ref: str) -> bool:
    return ref.split("?", 1)[0].endswith(".whl")


def wheel_commit(ref: str) -> str:
    """The commit a vLLM wheel's version names (`vllm-0.32.0+cu129.g1a2b3c4-...whl`)."""
    name = unquote(ref.split("?", 1)[0].rsplit("/", 1)[-1])
    found = _WHEEL_COMMIT.search(name.split("-", 2)[1] if name.count("-") >= 2 else name)
    if found is None:
        raise ConfigError(
            f"wheel {name!r} names no commit (a version with +g<sha>, as vLLM's own wheels "
            "have): give the commits it was built from instead"
        )
    return found.group(1)


@dataclass(frozen=True)
class Serve:
    """The serve command, taken apart."""

    env: dict[str, str]
    """Variables set before the command (`HF_TOKEN=... vllm serve ...`)."""
    model: str | None
    """The model a vLLM command serves; None: another server, taken as given."""
    args: list[str]
    """vLLM's flags after the model (`--port`/`--host` left out); else the whole command."""


def parse_serve(words: Sequence[str]) -> Serve:
    """`[NAME=value ...] vllm serve MODEL [flags]`, `python -m vllm.entrypoints... --model M
    [flags]`, or any other server's command (which must take `{port}`)."""
    words = list(words)
    env: dict[str, str] = {}
    while words and (m := _ENV.match(words[0])):
        env[m.group(1)] = m.group(2)
        words.pop(0)
    if not words:
        raise ConfigError("no serve command after `--` (e.g. -- vllm serve MODEL --flags)")
    if argv_secrets(words):
        raise ConfigError(
            "the serve command carries a secret (a flag named like one, or a login in an "
            "address): init writes none into a file; give it as NAME=value before the "
            "command (the config then reads ${NAME} from your shell)"
        )
    rest: list[str] | None = None
    if words[:2] == ["vllm", "serve"]:
        rest = words[2:]
    elif VLLM_MODULE in words and words.index(VLLM_MODULE) >= 1 and "-m" in words:
        rest = words[words.index(VLLM_MODULE) + 1 :]
    if rest is None:
        if not any("{port}" in w for w in words):
            raise ConfigError(
                "the serve command is not vLLM's (`vllm serve MODEL ...`), so it must take "
                "the port llm-bisect gives each probe as {port}"
            )
        return Serve(env, None, words)
    model = None
    if rest and not rest[0].startswith("-"):
        model = rest.pop(0)
    args: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        flag = word.split("=", 1)[0]
        if flag == "--model" and model is None:
            if "=" in word:
                model = word.split("=", 1)[1]
            elif i + 1 < len(rest):
                model = rest[i + 1]
                i += 1
        elif flag in _DROPPED:
            i += 0 if "=" in word else 1
        else:
            args.append(word)
        i += 1
    if model is None:
        raise ConfigError("the vLLM command names no model (vllm serve MODEL, or --model MODEL)")
    # the config's command is a template ({port}): a brace of vLLM's own is written twice
    return Serve(env, literal(model), [literal(a) for a in args])


@dataclass(frozen=True)
class Start:
    """What the user has: the two ends and how they serve."""

    good: str
    bad: str
    serve: Serve
    repo: str


def _q(value: str) -> str:
    """A YAML scalar that is exactly `value` (JSON strings are YAML's double-quoted form)."""
    return json.dumps(value)


def _gpus(args: Sequence[str]) -> int:
    """GPUs one probe needs: tensor x pipeline x data parallel sizes (1 where unsaid)."""
    sizes = {"--tensor-parallel-size": 1, "-tp": 1, "--pipeline-parallel-size": 1, "-pp": 1,
             "--data-parallel-size": 1, "-dp": 1}  # fmt: skip
    for i, word in enumerate(args):
        flag, _, value = word.partition("=")
        if flag in sizes:
            value = value or (args[i + 1] if i + 1 < len(args) else "1")
            sizes[flag] = int(value) if value.isdigit() else 1
    tp = sizes["--tensor-parallel-size"] * sizes["-tp"]
    pp = sizes["--pipeline-parallel-size"] * sizes["-pp"]
    dp = sizes["--data-parallel-size"] * sizes["-dp"]
    return tp * pp * dp


def _from_shell(name: str, value: str) -> tuple[str, str | None]:
    """What the config holds for one variable of the serve command, and the variable of the
    user's shell it reads (None: none): a secret is `${NAME}`, never its value. A login in an
    address is read alone (`http://${HTTPS_PROXY_LOGIN}@proxy:3128`): exporting the proxy
    itself would send llm-bisect's own requests through it."""
    if secret_names({name: value}):
        return "${" + name + "}", name
    found = [url_logins(url) for url in re.split(r"[\s,;]+", value)]  # `URL URL`: pip's
    logins = [login for one in found for login in one]
    if not logins:
        return value, None
    variable = f"{name}_LOGIN"
    written = value.replace(logins[0][0] + "@", "${" + variable + "}@", 1)
    if sum(map(bool, found)) > 1 or any(secret in written for secret, _ in logins):
        return "${" + name + "}", name  # several logins, or it shows elsewhere: read it all
    return written, variable


def _env_lines(env: Mapping[str, str]) -> list[str]:
    lines = []
    for name, value in env.items():
        written, variable = _from_shell(name, value)
        said = "" if variable is None else "   # from your shell; never written"
        if variable not in (None, name):
            said = f"   # the login: ${{{variable}}} from your shell; never written"
        lines.append(f"    {name}: {_q(written)}{said}")
    return lines or ["    {}"]


def shell_variables(env: Mapping[str, str]) -> list[str]:
    """The variables of the user's shell the config reads (the serve command's secrets), as
    said to the user: `HF_TOKEN`, `HTTPS_PROXY_LOGIN (the login in HTTPS_PROXY's address)`."""
    said = []
    for name, value in env.items():
        variable = _from_shell(name, value)[1]
        if variable is not None:
            said.append(
                variable if variable == name else f"{variable} (the login in {name}'s address)"
            )
    return said


def _repository(ref: str, flag: str) -> str:
    """An image's repository as the engine names it (`myreg:5000/vllm`), its tag or digest
    left out."""
    try:
        return parse_image_ref(ref).name
    except ValueError:
        raise ConfigError(f"{flag}: not an image reference {ref!r}") from None


def _list(items: Sequence[str], indent: str) -> list[str]:
    return [f"{indent}- {_q(item)}" for item in items]


def render(start: Start) -> tuple[str, str]:
    """(the config's text, what it is: `docker: two images`)."""
    images = is_image(start.good) and is_image(start.bad)
    if is_image(start.good) != is_image(start.bad):
        raise ConfigError("--good and --bad must both be images, or both commits or wheels")
    good, bad = start.good, start.bad
    wheels = is_wheel(good) and is_wheel(bad)
    if is_wheel(good) != is_wheel(bad):
        raise ConfigError("--good and --bad must both be wheels, or both commits or images")
    if wheels:
        good, bad = wheel_commit(good), wheel_commit(bad)
    serve = start.serve
    head = [
        "# Written by `llm-bisect init`: edit the lines marked `edit:`, then",
        "#   llm-bisect candidates THIS-FILE     # the plan: the candidates and their builds",
        "#   llm-bisect run THIS-FILE --out DIR  # the bisection (resumes where it stopped)",
        "# Every key: docs/configuration.md, or `llm-bisect schema`.",
        "candidates:",
        f"  repo: {_q(start.repo)}   # edit: a clone of the engine (git clone "
        "https://github.com/vllm-project/vllm), relative to this file",
    ]
    if images:
        head.append("  # the images you ran: each one's commit is read from the image (a label,")
        head.append("  # its env, a nightly-<sha> tag or a +g<sha> version)")
    elif wheels:
        head.append("  # the commits your wheels' versions name (+g<sha>)")
    head += [f"  good: {_q(good)}   # the build that worked", f"  bad: {_q(bad)}"]
    if images:
        what = "docker: two images"
        repo_image = _repository(start.good, "--good")
        _repository(start.bad, "--bad")
        gpus = _gpus(serve.args)
        model_args = ["--model", serve.model] if serve.model else []
        body = [
            "server:",
            "  launcher: docker",
            f"  image: {_q(repo_image + ':nightly-{commit}')}   # edit: one image per commit",
            "  args:",
            *_list([*model_args, *serve.args, "--port", "{port}"], "    "),
            "  port: 8000",
            "  gpus: all" if gpus > 1 else "  gpus: all   # edit: or a list of device ids",
            "  ipc: host",
            "  shm_size: 64g",
            "  volumes:",
            f"    - {_q('~/.cache/huggingface:/root/.cache/huggingface')}   # the weights, once",
            "  env:",
            *_env_lines(serve.env),
            "  ready_timeout: 3600   # a limit, not a wait: weights load for minutes",
            "  pull: missing",
            "# A commit without an image: its wheel in the good image, else its files over the",
            "# nearest build (Python-only changes); a commit neither can build is skipped.",
            "build:",
            "  strategies:",
            "    - type: image",
            "    - type: wheel",
            f"      index: {_q('https://wheels.vllm.ai/{commit}/')}",
            f"      image: {_q(start.good)}",
            "    - type: overlay",
            "      base: nearest",
            "      target: cuda",
            f"  cache: {{dir: {_q('~/.cache/llm-bisect/builds')}, disk_budget_gb: 200}}",
        ]
    else:
        what = "process: two wheels" if wheels else "process: two commits"
        if serve.model is not None:
            command = ["{python}", "-m", VLLM_MODULE, "--model", serve.model, *serve.args,
                       "--host", "127.0.0.1", "--port", "{port}"]  # fmt: skip
        else:
            command = list(serve.args)
        body = [
            "server:",
            "  launcher: process",
            "  command:",
            *_list(command, "    "),
            "  env:",
            *_env_lines(serve.env),
            "  ready_timeout: 1800   # a limit, not a wait",
        ]
        if serve.model is not None:
            body += [
                "# Each commit's own wheel (vLLM publishes one per main commit), else its files",
                "# over the nearest build that has one (Python-only changes).",
                "build:",
                "  strategies:",
                "    - type: wheel",
                f"      index: {_q('https://wheels.vllm.ai/{commit}/')}",
                "      package: vllm",
                f"      base_venv: {_q('~/.venvs/vllm-good')}   # edit: a venv of the good build",
                "    - type: overlay",
                "      package: vllm",
                "      base: nearest",
                "      target: cuda",
                f"  cache: {{dir: {_q('~/.cache/llm-bisect/builds')}, disk_budget_gb: 200}}",
            ]
    tail = [
        "# No `checks:`: the defaults (canary, expect, logprobs, eval), judged against the good",
        "# build's own answers (its golden, recorded on the first run).",
    ]
    return "\n".join([*head, *body, *tail]) + "\n", what


def first_steps(env: Mapping[str, str]) -> str:
    """What to do before the next commands (`env`: the serve command's variables): edit the
    config, and export the secrets it reads from the shell, by name."""
    steps = "edit the lines marked `edit:`"
    if variables := shell_variables(env):
        steps += (
            f", export what it reads from your shell (init wrote no value): {', '.join(variables)}"
        )
    return steps


def next_commands(path: str) -> list[str]:
    """What to run next, as the user pastes it."""
    quoted = shlex.quote(path)
    return [f"llm-bisect candidates {quoted}", f"llm-bisect run {quoted} --out bisect-run"]
