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

`--launcher slurm` writes one batch job per probe (the same builds, on the cluster's shared
filesystem; two images: each commit's image through pyxis), `--launcher kubernetes` one Job
per probe of the images (secrets from a Secret of the namespace, never in the file). With
`--nodes 2`, vLLM's data-parallel ranks are split across the two nodes as in production:
the head serves the API and its ranks, the other node runs `--headless` from the next rank
and reaches the head at `{head}` (on Kubernetes a LeaderWorkerSet where LWS is installed).
What only the user knows and no flag gave is a placeholder (`<edit: your namespace>`) that
the config's validation names until it is filled in.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .errors import ConfigError
from .redact import url_logins
from .registry import parse_image_ref
from .secretnames import argv_secrets, secret_names
from .templates import literal
from .yamlfile import PLACEHOLDER

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


LAUNCHERS = ("docker", "process", "slurm", "kubernetes")
"""What init writes for (default: docker for two images, process for commits or wheels)."""


@dataclass(frozen=True)
class Place:
    """Where the probes run, and what only the user knows of it."""

    launcher: str | None = None
    """One of LAUNCHERS; None: docker for two images, process for commits or wheels."""
    nodes: int = 1
    """Nodes one probe spans (slurm, kubernetes)."""
    gpus_per_node: int | None = None
    """GPUs each node (pod) of a probe gets; None: from vLLM's parallel sizes; 0: none."""
    namespace: str | None = None
    """Kubernetes: the namespace; None: a placeholder."""
    pull_secret: str | None = None
    """Kubernetes: the image-pull Secret of a private registry."""


@dataclass(frozen=True)
class Start:
    """What the user has: the two ends and how they serve."""

    good: str
    bad: str
    serve: Serve
    repo: str
    place: Place = Place()


def _q(value: str) -> str:
    """A YAML scalar that is exactly `value` (JSON strings are YAML's double-quoted form)."""
    return json.dumps(value)


def _parallel(args: Sequence[str]) -> tuple[int, int, int]:
    """vLLM's tensor, pipeline and data parallel sizes (1 where unsaid)."""
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
    return tp, pp, dp


def _gpus(args: Sequence[str]) -> int:
    """GPUs one probe needs: tensor x pipeline x data parallel sizes (1 where unsaid)."""
    tp, pp, dp = _parallel(args)
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


_DP_ONE_NODE = {"--data-parallel-size-local": 1, "-dpl": 1, "--data-parallel-address": 1,
                "-dpa": 1, "--data-parallel-rpc-port": 1, "-dpp": 1,
                "--data-parallel-start-rank": 1, "-dpr": 1, "--headless": 0}  # fmt: skip
"""vLLM's flags that place data-parallel ranks on nodes (each with how many values it takes):
init writes its own where a probe spans nodes."""
DP_RPC_PORT = "13345"


def _split_nodes(args: Sequence[str], nodes: int) -> tuple[list[str], list[str] | None]:
    """vLLM's flags for the head node and for the others (None: one node): the
    data-parallel ranks split evenly, the head serving the API and reachable at `{head}`,
    the other node `--headless` from the next rank."""
    if nodes == 1:
        return list(args), None
    dp = _parallel(args)[2]
    if nodes != 2 or dp % nodes:
        raise ConfigError(
            f"--nodes {nodes}: init splits vLLM's data-parallel ranks over two nodes; the "
            f"serve command's --data-parallel-size ({dp}) must be even, and --nodes 2"
        )
    kept: list[str] = []
    i = 0
    while i < len(args):
        flag, eq, _ = args[i].partition("=")
        if flag in _DP_ONE_NODE:
            i += 1 + (0 if eq else _DP_ONE_NODE[flag])
            continue
        kept.append(args[i])
        i += 1
    local = str(dp // nodes)
    placed = ["--data-parallel-size-local", local, "--data-parallel-address", "{head}",
              "--data-parallel-rpc-port", DP_RPC_PORT]  # fmt: skip
    return [*kept, *placed], [*kept, *placed, "--headless", "--data-parallel-start-rank", local]


def _ends(start: Start) -> tuple[str, str, bool, bool]:
    """(good, bad, both images, both wheels): a wheel's end is the commit it names."""
    images = is_image(start.good) and is_image(start.bad)
    if is_image(start.good) != is_image(start.bad):
        raise ConfigError("--good and --bad must both be images, or both commits or wheels")
    wheels = is_wheel(start.good) and is_wheel(start.bad)
    if is_wheel(start.good) != is_wheel(start.bad):
        raise ConfigError("--good and --bad must both be wheels, or both commits or images")
    if wheels:
        return wheel_commit(start.good), wheel_commit(start.bad), False, True
    return start.good, start.bad, images, False


def _launcher(place: Place, images: bool) -> str:
    """The launcher to write, after what each refuses."""
    launcher = place.launcher or ("docker" if images else "process")
    if launcher not in LAUNCHERS:
        raise ConfigError(f"--launcher: one of {', '.join(LAUNCHERS)}, not {launcher!r}")
    if launcher == "docker" and not images:
        raise ConfigError("--launcher docker runs images: give --good and --bad as images")
    if launcher == "process" and images:
        raise ConfigError("--launcher process runs commits or wheels: give --good and --bad so")
    if launcher == "kubernetes" and not images:
        raise ConfigError("--launcher kubernetes runs images: give --good and --bad as images")
    cluster = launcher in ("slurm", "kubernetes")
    if not cluster and (place.nodes != 1 or place.gpus_per_node is not None):
        raise ConfigError("--nodes and --gpus-per-node: with --launcher slurm or kubernetes")
    if launcher != "kubernetes" and (place.namespace or place.pull_secret):
        raise ConfigError("--namespace and --image-pull-secret: with --launcher kubernetes")
    return launcher


def _placeholder(what: str) -> str:
    return f"<edit: {what}>"


def _secret_name(variable: str) -> str:
    """The Secret a variable is read from on Kubernetes (`HF_TOKEN`: `hf-token`)."""
    return re.sub(r"[^a-z0-9]+", "-", variable.lower()).strip("-") or "secret"


def kubernetes_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of the serve command a Kubernetes config reads from a Secret, each with
    its Secret's name (a login in an address: the whole address)."""
    return {name: _secret_name(name) for name, value in env.items() if _from_shell(name, value)[1]}


def _per_node(place: Place, serve: Serve) -> int | None:
    """GPUs a node (pod) of a probe gets; None: unknown (another server than vLLM)."""
    if place.gpus_per_node is not None:
        return place.gpus_per_node
    if serve.model is None:
        return None
    return max(1, _gpus(serve.args) // place.nodes)


def render(start: Start) -> tuple[str, str]:
    """(the config's text, what it is: `docker: two images`)."""
    good, bad, images, wheels = _ends(start)
    place = start.place
    launcher = _launcher(place, images)
    serve = start.serve
    if launcher == "slurm" and images:  # the ends are commits: pyxis runs each one's image
        good = _placeholder(f"the commit {start.good} was built from")
        bad = _placeholder(f"the commit {start.bad} was built from")
    head = [
        "# Written by `llm-bisect init`: edit the lines marked `edit:`, then",
        "#   llm-bisect candidates THIS-FILE     # the plan: the candidates and their builds",
        "#   llm-bisect run THIS-FILE --out DIR  # the bisection (resumes where it stopped)",
        "# Every key: docs/configuration.md, or `llm-bisect schema`.",
        "candidates:",
        f"  repo: {_q(start.repo)}   # edit: a clone of the engine (git clone "
        "https://github.com/vllm-project/vllm), relative to this file",
    ]
    if images and launcher != "slurm":
        head.append("  # the images you ran: each one's commit is read from the image (a label,")
        head.append("  # its env, a nightly-<sha> tag or a +g<sha> version)")
    elif images:
        head.append("  # the commits of the images you ran (their nightly-<sha> tag; or the")
        head.append(
            "  # good: and bad: `llm-bisect candidates` prints for a Docker config of them)"
        )
    elif wheels:
        head.append("  # the commits your wheels' versions name (+g<sha>)")
    head += [f"  good: {_q(good)}   # the build that worked", f"  bad: {_q(bad)}"]
    if launcher == "kubernetes":
        body = _kubernetes(start)
        what = "kubernetes: two images"
    elif launcher == "slurm":
        body = _slurm(start, images)
        what = f"slurm: two {'images' if images else 'wheels' if wheels else 'commits'}"
    elif images:
        what = "docker: two images"
        body = _docker(start)
    else:
        what = "process: two wheels" if wheels else "process: two commits"
        body = _process(serve)
    if launcher in ("slurm", "kubernetes") and place.nodes > 1:
        what += f", {place.nodes} nodes a probe"
    tail = [
        "# No `checks:`: the defaults (canary, expect, logprobs, eval), judged against the good",
        "# build's own answers (its golden, recorded on the first run).",
    ]
    return "\n".join([*head, *body, *tail]) + "\n", what


def _docker(start: Start) -> list[str]:
    serve = start.serve
    repo_image = _repository(start.good, "--good")
    _repository(start.bad, "--bad")
    gpus = _gpus(serve.args)
    model_args = ["--model", serve.model] if serve.model else []
    return [
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


def _vllm_command(serve: Serve, args: Sequence[str], host: str) -> list[str]:
    return ["{python}", "-m", VLLM_MODULE, "--model", serve.model or "", *args,
            "--host", host, "--port", "{port}"]  # fmt: skip


def _builds(shared: str = "") -> list[str]:
    """Each commit's wheel, else an overlay: the build section of a process or Slurm config."""
    return [
        "# Each commit's own wheel (vLLM publishes one per main commit), else its files",
        f"# over the nearest build that has one (Python-only changes){shared}.",
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


def _process(serve: Serve) -> list[str]:
    if serve.model is not None:
        command = _vllm_command(serve, serve.args, "127.0.0.1")
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
    return body + (_builds() if serve.model is not None else [])


def _nodes_lines(place: Place, gpus: int | None, key: str, what: str) -> list[str]:
    """`nodes:` and the GPUs of each node (`key`), or the line that says to fill them."""
    lines = [f"  nodes: {place.nodes}" + ("   # one probe spans them" if place.nodes > 1 else "")]
    if gpus is None:
        lines.append(f"  # {key}: 1   # edit: the GPUs {what} needs (init --gpus-per-node)")
    elif gpus > 0:
        lines.append(f"  {key}: {gpus}   # {what}")
    return lines


def _slurm(start: Start, images: bool) -> list[str]:
    serve, place = start.serve, start.place
    head_args, worker_args = _split_nodes(serve.args, place.nodes)
    body = [
        "server:",
        "  launcher: slurm",
        "  # partition: NAME   # edit: default the cluster's",
        "  # account: NAME     # edit: default yours",
        *_nodes_lines(place, _per_node(place, serve), "gpus_per_node", "each node"),
        '  # time: "02:00:00"   # a job\'s limit; sbatch_args: [--qos=high] for more',
    ]
    if images:
        body.append(
            f"  container_image: {_q(_repository(start.good, '--good') + ':nightly-{commit}')}"
            "   # edit: one image per commit (pyxis)"
        )
        _repository(start.bad, "--bad")
        mount = _q("/shared/hf-cache:/root/.cache/huggingface")
        body += ["  container_mounts:", f"    - {mount}   # edit: the weights, on every node"]
    if serve.model is None:
        command: list[str] = list(serve.args)
        worker = None
    elif images:
        tail = ["--host", "0.0.0.0", "--port", "{port}"]
        command = ["vllm", "serve", serve.model, *head_args, *tail]
        worker = None if worker_args is None else ["vllm", "serve", serve.model, *worker_args]
    else:
        command = _vllm_command(serve, head_args, "0.0.0.0")
        worker = None
        if worker_args is not None:
            worker = ["{python}", "-m", VLLM_MODULE, "--model", serve.model, *worker_args]
    body += ["  command:", *_list(command, "    ")]
    if worker is not None:
        body += ["  worker_command:   # the other node: headless, from the next rank",
                 *_list(worker, "    ")]  # fmt: skip
    body += [
        "  env:   # on every node; the job takes your shell's environment (sbatch --export=ALL)",
        *_env_lines(serve.env),
        "  ready_timeout: 3600   # a limit, not a wait: weights load for minutes",
        "  pending_timeout: 7200   # seconds in the queue before the probe is skip",
    ]
    if serve.model is not None and not images:
        body += _builds(" on a filesystem the nodes share")
    return body


def _kubernetes(start: Start) -> list[str]:
    serve, place = start.serve, start.place
    head_args, worker_args = _split_nodes(serve.args, place.nodes)
    if serve.model is not None:
        entrypoint = ["vllm", "serve"]
        args = [serve.model, *head_args, "--host", "0.0.0.0", "--port", "{port}"]
        worker = None if worker_args is None else [serve.model, *worker_args]
    else:
        entrypoint, args, worker = serve.args[:1], serve.args[1:], None
    namespace = place.namespace or _placeholder("your namespace")
    body = [
        "server:",
        "  launcher: kubernetes",
        f"  namespace: {_q(namespace)}",
        f"  image: {_q(_repository(start.good, '--good') + ':nightly-{commit}')}"
        "   # edit: one image per commit",
    ]
    _repository(start.bad, "--bad")
    if place.pull_secret:
        body.append(f"  image_pull_secrets: [{_q(place.pull_secret)}]")
    else:
        body.append("  # image_pull_secrets: [NAME]   # a private registry's pull Secret "
                    "(init --image-pull-secret)")  # fmt: skip
    if place.nodes > 1:
        body.append("  # two pods a probe: a LeaderWorkerSet where LWS is installed, else an "
                    "Indexed Job")  # fmt: skip
    body += _nodes_lines(place, _per_node(place, serve), "gpus", "each pod (one node's)")
    body += ["  entrypoint:", *_list(entrypoint, "    "), "  args:", *_list(args, "    ")]
    if worker is not None:
        body += ["  worker_args:   # the other pod: headless, from the next rank",
                 *_list(worker, "    ")]  # fmt: skip
    body += [
        "  port: 8000",
        "  shm_size: 64Gi",
        "  # model_cache: {pvc: hf-cache}   # edit: a claim holding the weights (else each pod"
        " downloads them)",
    ]
    secrets = kubernetes_secrets(serve.env)
    if secrets:
        body.append("  secret_env:   # from a Secret of the namespace: never in the file")
        for name, secret in secrets.items():
            body.append(f"    {name}: {{secret: {_q(secret)}, key: value}}")
    plain = {k: v for k, v in serve.env.items() if k not in secrets}
    body += ["  env:", *_env_lines(plain), "  ready_timeout: 3600   # a limit, not a wait"]
    return body


def stand_ins(data: Any) -> Any:
    """The config's data with each placeholder a plain word: what init checks validates."""
    if isinstance(data, str):
        return "x" if PLACEHOLDER.fullmatch(data) else data
    if isinstance(data, dict):
        return {k: stand_ins(v) for k, v in data.items()}
    if isinstance(data, list):
        return [stand_ins(v) for v in data]
    return data


def first_steps(text: str, start: Start) -> str:
    """What to do before the next commands: fill in the placeholders, edit the config, and
    export (or, on Kubernetes, store in Secrets) what it reads from the shell, by name."""
    steps = "edit the lines marked `edit:`"
    if PLACEHOLDER.search(text):
        steps = "fill in each `<edit: ...>` (the config is refused until then) and " + steps
    env = start.serve.env
    if start.place.launcher == "kubernetes" and (secrets := kubernetes_secrets(env)):
        namespace = shlex.quote(start.place.namespace or "NAMESPACE")
        made = "; ".join(
            f'kubectl -n {namespace} create secret generic {secret} --from-literal=value="${name}"'
            for name, secret in secrets.items()
        )
        steps += f", make the Secrets it reads (init wrote no value): {made}"
    elif variables := shell_variables(env):
        steps += (
            f", export what it reads from your shell (init wrote no value): {', '.join(variables)}"
        )
    return steps


def next_commands(path: str) -> list[str]:
    """What to run next, as the user pastes it."""
    quoted = shlex.quote(path)
    return [f"llm-bisect candidates {quoted}", f"llm-bisect run {quoted} --out bisect-run"]
