"""llm-bisect's vLLM worker extension: per-module output summaries, for `localize`.

Loaded inside each vLLM worker with `--worker-extension-cls
llm_bisect_worker.Extension` (this folder on the server's PYTHONPATH) and driven over
`POST /collective_rpc` (VLLM_SERVER_DEV_MODE=1). Needs torch only: it never imports
llm-bisect, whose dependencies the server's Python need not have.

    llm_bisect_install(spec)   forward pre-hooks and hooks on every module of the model
    (one request)              each module's tensor arguments and outputs, summarised
    llm_bisect_collect()       the summaries in execution order, each module's class and
                               caller; the hooks removed

Every tensor a module is called with is recorded under its argument's name (vLLM calls a
decoder layer as `layer(positions, hidden_states, residual)` and attention with keyword
arguments): `arg` is `hidden_states`, or `args[2]` where the signature does not name it,
`x[1]` inside a tuple. Outputs are `arg` "" (one tensor) or `[0]`, `[1]`... (a tuple: a
decoder layer returns (hidden_states, residual)). The root module is labelled `<root>`
(its children are `model`, `lm_head`...). A module's caller is the nearest module above it
that runs code of its own: a ModuleList, ModuleDict or plain Sequential only holds its
children, so `model.layers.1` is called by `model`. A module whose class replaced
`__call__` (vLLM's @support_torch_compile: in eager mode it calls forward directly, so
torch's hooks never fire; LlamaModel is one) is recorded around its forward instead.

A summary holds, per token position (row), the mean, the norm, a few quantiles, a
fixed sample of the values (the same indices in every build: seeded by the row's
length) and a hash of that sample; and how many values are NaN or infinite. Hooks fire
in eager mode only (torch.compile and CUDA graphs bypass them), so the two localisation
probes run with --enforce-eager.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

_STATE: dict[int, dict[str, Any]] = {}
QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)
ROOT = "<root>"
"""The label of the model itself (its children's names have no prefix: `model`, `lm_head`)."""
NESTING = 3
"""How deep tensors are looked for inside tuples, lists and dicts of an argument."""
_HOLDERS = (nn.Module.forward, nn.Sequential.forward)
"""forward methods that run no code of their own (unimplemented, or children in turn)."""


def _named(value: Any, name: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors in an argument or output, each with its name: `name`, `name[1]`..."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif depth >= NESTING:
        return
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _named(item, f"{name}[{i}]", depth + 1)
    elif isinstance(value, Mapping) or isinstance(getattr(value, "tensors", None), Mapping):
        items = value if isinstance(value, Mapping) else value.tensors
        for key, item in items.items():
            yield from _named(item, f"{name}[{key}]", depth + 1)


def _signature(module: nn.Module) -> inspect.Signature | None:
    """The signature that names the module's arguments: forward's, or where forward only
    passes `*args, **kwargs` on (vLLM's CustomOp), the method it dispatches to."""
    for attr in ("forward", "_forward_method", "forward_native"):
        method = getattr(module, attr, None)
        if not callable(method):
            continue
        try:
            signature = inspect.signature(method)
        except (TypeError, ValueError):
            continue
        kinds = {p.kind for p in signature.parameters.values()}
        if kinds - {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
            return signature
    return None


def _arguments(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[tuple[str, Any]]:
    """(name, value) of every argument of one call, positional ones bound to their names."""
    try:
        if signature is None:
            raise TypeError
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        yield from ((f"args[{i}]", v) for i, v in enumerate(args))
        yield from kwargs.items()
        return
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            yield from ((f"{name}[{i}]", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            yield from value.items()
        else:
            yield name, value


def _caller(name: str, holders: set[str]) -> str:
    """The nearest module above `name` that runs code of its own."""
    while "." in name:
        name = name.rsplit(".", 1)[0]
        if name not in holders:
            return name
    return ROOT


class _Unwrap:
    """Takes back the forward a module was given in place of hooks (a hook's `remove`)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.own = module.__dict__.get("forward")
        """A forward the instance itself held before (None: its class's)."""

    def remove(self) -> None:
        if self.own is None:
            self.module.__dict__.pop("forward", None)
        else:
            self.module.__dict__["forward"] = self.own


def _wrap(module: nn.Module, before: Callable[..., None], after: Callable[..., None]) -> _Unwrap:
    """Record a module whose class replaced __call__ (vLLM's @support_torch_compile calls
    forward directly in eager mode: torch's hooks never fire) around its forward."""
    undo = _Unwrap(module)
    forward = module.forward

    def recorded(*args: Any, **kwargs: Any) -> Any:
        before(module, args, kwargs)
        output = forward(*args, **kwargs)
        after(module, args, output)
        return output

    module.__dict__["forward"] = recorded
    return undo


def _summary(tensor: torch.Tensor, sample: int, save: str | None, key: str) -> dict[str, Any]:
    t = tensor.detach()
    shape = list(t.shape)
    if not t.is_floating_point():
        t = t.to(torch.float32)
    rows = t.reshape(t.shape[0], -1) if t.dim() >= 2 else t.reshape(1, -1)
    rows = rows.to(torch.float32).cpu()
    width = rows.shape[1]
    out: dict[str, Any] = {"shape": shape, "dtype": str(tensor.dtype).replace("torch.", "")}
    out["nonfinite"] = int((~torch.isfinite(rows)).sum())
    if save:
        name = key.replace("/", "_").replace("<", "").replace(">", "")
        torch.save(tensor.detach().cpu(), os.path.join(save, name + ".pt"))
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
    return out


class Extension:
    """Mixed into vLLM's worker class; methods are called through collective_rpc."""

    def llm_bisect_install(self, spec: str = "{}") -> dict[str, Any]:
        options = json.loads(spec)
        sample = int(options.get("sample", 64))
        save = options.get("save") or None
        model = self.model_runner.model  # type: ignore[attr-defined]
        state: dict[str, Any] = {"events": [], "calls": {}, "handles": [], "modules": {}}
        rank = self._llm_bisect_rank()
        if save:
            save = os.path.join(save, f"rank{rank}")
            os.makedirs(save, exist_ok=True)
        _STATE[id(self)] = state

        def key_of(name: str) -> str:
            count = state["calls"].get(name, 0)
            return name if count == 0 else f"{name}#{count}"

        def record(key: str, kind: str, arg: str, tensor: torch.Tensor) -> None:
            at = f"{key}.{kind}.{arg}" if kind == "input" else f"{key}.{kind}{arg}"
            state["events"].append(
                {"module": key, "kind": kind, "arg": arg, **_summary(tensor, sample, save, at)}
            )

        def pre(name: str, signature: inspect.Signature | None) -> Callable[..., None]:
            def hook(_module: Any, args: Any, kwargs: Any) -> None:
                key = key_of(name)
                for arg, value in _arguments(signature, tuple(args), dict(kwargs or {})):
                    for label, tensor in _named(value, arg):
                        record(key, "input", label, tensor)

            return hook

        def post(name: str) -> Callable[..., None]:
            def hook(_module: Any, _args: Any, output: Any) -> None:
                key = key_of(name)
                state["calls"][name] = state["calls"].get(name, 0) + 1
                lone = isinstance(output, torch.Tensor)
                for label, tensor in _named(output, ""):
                    record(key, "output", "" if lone else label, tensor)

            return hook

        named = list(model.named_modules())
        holders = {
            name
            for name, module in named
            if name and getattr(type(module), "forward", None) in _HOLDERS
        }
        for name, module in named:
            label = name or ROOT
            state["modules"][label] = {
                "type": type(module).__name__,
                "caller": _caller(name, holders) if name else "",
            }
            before, after = pre(label, _signature(module)), post(label)
            if type(module).__call__ is not nn.Module.__call__:
                state["handles"].append(_wrap(module, before, after))
                continue
            state["handles"].append(module.register_forward_pre_hook(before, with_kwargs=True))
            state["handles"].append(module.register_forward_hook(after))
        return {"rank": rank, "modules": len(named)}

    def llm_bisect_collect(self) -> dict[str, Any]:
        state = _STATE.pop(id(self), None)
        if state is None:
            return {"rank": self._llm_bisect_rank(), "events": [], "error": "not installed"}
        for handle in state["handles"]:
            handle.remove()
        return {
            "rank": self._llm_bisect_rank(),
            "root": ROOT,
            "modules": state["modules"],
            "events": state["events"],
        }

    def _llm_bisect_rank(self) -> int:
        rank = getattr(self, "rank", None)
        if isinstance(rank, int):
            return rank
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return int(torch.distributed.get_rank())
        return 0
