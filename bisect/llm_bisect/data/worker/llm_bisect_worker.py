"""llm-bisect's vLLM worker extension: per-module output summaries, for `localize`.

Loaded inside each vLLM worker with `--worker-extension-cls
llm_bisect_worker.Extension` (this folder on the server's PYTHONPATH) and driven over
`POST /collective_rpc` (VLLM_SERVER_DEV_MODE=1). Needs torch only: it never imports
llm-bisect, whose dependencies the server's Python need not have.

    llm_bisect_install(spec)   forward pre-hooks and hooks on every module of the model
    (one request)              each module's first input and its output, summarised
    llm_bisect_collect()       the summaries in execution order; the hooks removed

A summary holds, per token position (row), the mean, the norm, a few quantiles, a
fixed sample of the values (the same indices in every build: seeded by the row's
length) and a hash of that sample. Hooks fire in eager mode only (torch.compile and
CUDA graphs bypass them), so the two localisation probes run with --enforce-eager.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import torch

_STATE: dict[int, dict[str, Any]] = {}
QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a module's output (or input): itself, or those in a tuple/list."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _summary(tensor: torch.Tensor, sample: int, save: str | None, key: str) -> dict[str, Any]:
    t = tensor.detach()
    shape = list(t.shape)
    if not t.is_floating_point():
        t = t.to(torch.float32)
    rows = t.reshape(t.shape[0], -1) if t.dim() >= 2 else t.reshape(1, -1)
    rows = rows.to(torch.float32).cpu()
    width = rows.shape[1]
    out: dict[str, Any] = {"shape": shape, "dtype": str(tensor.dtype).replace("torch.", "")}
    if width == 0:
        out["rows"] = []
        return out
    generator = torch.Generator().manual_seed(width)
    picked = torch.randperm(width, generator=generator)[: min(sample, width)].sort().values
    q = torch.tensor(QUANTILES)
    summaries = []
    for row in rows:
        values = row[picked]
        summaries.append(
            {
                "mean": float(row.mean()),
                "norm": float(row.norm()),
                "q": [float(v) for v in torch.quantile(row, q)] if width < 2**24 else [],
                "sample": [float(v) for v in values],
                "hash": hashlib.sha1(values.numpy().tobytes()).hexdigest()[:16],
            }
        )
    out["rows"] = summaries
    if save:
        torch.save(tensor.detach().cpu(), os.path.join(save, key.replace("/", "_") + ".pt"))
    return out


class Extension:
    """Mixed into vLLM's worker class; methods are called through collective_rpc."""

    def llm_bisect_install(self, spec: str = "{}") -> dict[str, Any]:
        options = json.loads(spec)
        sample = int(options.get("sample", 64))
        save = options.get("save") or None
        model = self.model_runner.model  # type: ignore[attr-defined]
        state: dict[str, Any] = {"events": [], "calls": {}, "handles": []}
        rank = self._llm_bisect_rank()
        if save:
            save = os.path.join(save, f"rank{rank}")
            os.makedirs(save, exist_ok=True)
        _STATE[id(self)] = state

        def key_of(name: str) -> str:
            count = state["calls"].get(name, 0)
            return name if count == 0 else f"{name}#{count}"

        def pre(name: str) -> Any:
            def hook(_module: Any, args: Any) -> None:
                found = _tensors(args)
                if found:
                    key = key_of(name)
                    state["events"].append(
                        {"module": key, "kind": "input",
                         **_summary(found[0], sample, save, f"{key}.input")}
                    )  # fmt: skip

            return hook

        def post(name: str) -> Any:
            def hook(_module: Any, _args: Any, output: Any) -> None:
                key = key_of(name)
                state["calls"][name] = state["calls"].get(name, 0) + 1
                for i, tensor in enumerate(_tensors(output)):
                    state["events"].append(
                        {"module": key, "kind": "output" if i == 0 else f"output{i}",
                         **_summary(tensor, sample, save, f"{key}.output{i}")}
                    )  # fmt: skip

            return hook

        for name, module in model.named_modules():
            label = name or "model"
            state["handles"].append(module.register_forward_pre_hook(pre(label)))
            state["handles"].append(module.register_forward_hook(post(label)))
        return {"rank": rank, "modules": len(state["handles"]) // 2}

    def llm_bisect_collect(self) -> dict[str, Any]:
        state = _STATE.pop(id(self), None)
        if state is None:
            return {"rank": self._llm_bisect_rank(), "events": [], "error": "not installed"}
        for handle in state["handles"]:
            handle.remove()
        return {"rank": self._llm_bisect_rank(), "events": state["events"]}

    def _llm_bisect_rank(self) -> int:
        rank = getattr(self, "rank", None)
        if isinstance(rank, int):
            return rank
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return int(torch.distributed.get_rank())
        return 0
