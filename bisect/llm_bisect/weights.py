"""Which weights a server loaded: the model its command line names, and the revision of it
that lies where the server runs. vLLM does not log it: it calls huggingface_hub's
snapshot_download, which reads (and, online, moves) a ref of the hub cache.

    --model ORG/NAME (or `vllm serve ORG/NAME`) [--revision R] [--download-dir D]
        cache    D, else HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub,
                 XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub
        R 40 hex → R                                          origin: `hub cache: --revision`
        else cache/models--ORG--NAME/refs/<R or main> → hex   origin: `hub cache: refs/<R|main>`
    --model /a/folder
        .../snapshots/<40 hex> → that hex                     origin: `snapshot folder`
        else a digest of config.json, the weight index and the weight files' names and
        sizes                                                 origin: `local folder`

`asked` reads the command line (pure); `resolve` reads the files where the server runs,
with its environment and no network, after the server loaded them (a ref an online start
moved is read as it left it). This module imports the standard library only: its own source
is what `probe_source` runs inside a container or pod (`python3 -c`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

FLAGS = {
    "--model": "model",
    "--revision": "revision",
    "--tokenizer": "tokenizer",
    "--tokenizer-revision": "tokenizer_revision",
    "--download-dir": "download_dir",
}
"""vLLM's flags that say which weights (and tokenizer) it loads, and from where."""
_COMMIT = re.compile(r"[0-9a-f]{40}")
_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TIMEOUT_S = 30.0
"""The most seconds `probe_source` may take where the server runs (it reads a few files)."""
LOCAL = "local folder"
"""`origin` of a folder that is not a hub snapshot: its revision is a digest of its files."""


def asked(argv: Sequence[str]) -> dict[str, str]:
    """What a server's command line asks for: `model`, `revision`, `tokenizer`,
    `tokenizer_revision`, `download_dir`, each where named (the last copy wins, as
    argparse's); `vllm serve MODEL` names the model by position. Pure."""
    found: dict[str, str] = {}
    words = list(argv)
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in FLAGS and (eq or i + 1 < len(words)):
            found[FLAGS[name]] = value if eq else words[i + 1]
        after = words[i + 1] if i + 1 < len(words) else "-"
        if (
            word == "serve"
            and i > 0
            and os.path.basename(words[i - 1]).startswith("vllm")
            and not after.startswith("-")
            and "model" not in found
        ):
            found["model"] = after
    return found


def image_argv(command: Sequence[str] | None, args: Sequence[str]) -> list[str]:
    """The words a container runs when only its `args` are known: with the image's own
    entrypoint (vLLM's images: `vllm serve`), a first argument that is no flag is the model,
    as `vllm serve` takes it. Pure."""
    if command:
        return [*command, *args]
    if args and not args[0].startswith("-"):
        return ["vllm", "serve", *args]
    return list(args)


def hub_cache(env: Mapping[str, str]) -> str:
    """The hub cache huggingface_hub uses in an environment (its constants.HF_HUB_CACHE). Pure."""
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache"),
        "huggingface",
    )
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    return cache or os.path.join(home, "hub")


def resolve(wanted: Mapping[str, str], env: Mapping[str, str], cwd: str = ".") -> dict[str, str]:
    """Where the weights `wanted` (what `asked` read) come from, read here: `model`,
    `revision` (where found), `origin` (how it was found, or why not), and `tokenizer` /
    `tokenizer_revision` where --tokenizer or --tokenizer-revision are given; {} without a
    model. Reads no network and no secret; never raises over a missing or unreadable file."""
    model = wanted.get("model")
    if not model:
        return {}
    cache = wanted.get("download_dir") or hub_cache(env)
    out = {"model": model, **_revision(model, wanted.get("revision"), cache, cwd)}
    tokenizer = wanted.get("tokenizer") or model
    if "tokenizer" in wanted or "tokenizer_revision" in wanted:
        said = _revision(tokenizer, wanted.get("tokenizer_revision"), cache, cwd)
        out["tokenizer"] = tokenizer
        if said.get("revision"):
            out["tokenizer_revision"] = said["revision"]
    return out


def _revision(name: str, revision: str | None, cache: str, cwd: str) -> dict[str, str]:
    folder = os.path.join(cwd, os.path.expanduser(name))
    if os.path.isdir(folder):  # vLLM: a path that exists is loaded as it is
        for path in (folder, os.path.realpath(folder)):
            parts = Path(path).parts
            if len(parts) > 1 and parts[-2] == "snapshots" and _COMMIT.fullmatch(parts[-1]):
                return {"revision": parts[-1], "origin": "snapshot folder"}
        return {"revision": _digest(folder), "origin": LOCAL}
    repo = os.path.join(os.path.expanduser(cache), "models--" + name.replace("/", "--"))
    if revision and _COMMIT.fullmatch(revision):
        commit, how = revision, "hub cache: --revision"
    else:
        ref = revision or "main"
        how = f"hub cache: refs/{ref}"
        try:
            with open(os.path.join(repo, "refs", ref)) as f:
                commit = f.read(100).strip()
        except OSError:
            return {"origin": f"not in the hub cache {cache} (no refs/{ref})"}
    if not os.path.isdir(os.path.join(repo, "snapshots", commit)):
        how += f", no snapshots/{commit[:12]}"
    return {"revision": commit, "origin": how}


def _digest(folder: str) -> str:
    """16 hex of config.json and the weight index (their bytes) and the weight files' names
    and sizes: two folders with other weights differ (a file's bytes are not read)."""
    digest = hashlib.sha256()
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return ""
    for name in names:
        path = os.path.join(folder, name)
        try:
            if name == "config.json" or name.endswith(".index.json"):
                with open(path, "rb") as f:
                    digest.update(name.encode() + b"\0" + f.read(64 * 2**20) + b"\0")
            elif name.endswith(_WEIGHT_FILES):
                digest.update(f"{name}\0{os.path.getsize(path)}\0".encode())
        except OSError:
            continue
    return digest.hexdigest()[:16]


def probe_source(wanted: Mapping[str, str]) -> str:
    """Python to run where the server runs (standard library only): prints `resolve` of what
    the command line asked, in its own environment and working folder, as JSON."""
    return (
        Path(__file__).read_text()
        + "\n\nimport json as _json\n"
        + f"print(_json.dumps(resolve({dict(wanted)!r}, os.environ, os.getcwd())))\n"
    )
