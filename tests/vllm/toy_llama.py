"""A small torch Llama called the way vLLM calls its own, hooked by llm-bisect's worker extension.

    python toy_llama.py WORKER_DIR PLANT      (with a Python that has torch)

prints what `llm_bisect_collect` returns (a list with one rank's result) after one forward
of fixed tokens through the model, with PLANT applied:

    none     vLLM's code as it is
    layer    LlamaDecoderLayer.forward hands attention the residual stream, not the
             normalised hidden states (a change in the layer's own code)
    between  LlamaModel.forward adds the residual to the hidden states in place after
             each layer (a change in the model's code, between two layers)

The modules' names, classes and call signatures are vLLM's (model/llama.py, 0.32): the
root LlamaForCausalLM, `model` a LlamaModel whose class replaces __call__ (as
@support_torch_compile does: in eager mode it calls forward directly, and torch's hooks
never fire), `model.layers` a ModuleList, each layer called as
`layer(positions, hidden_states, residual)` and returning (hidden_states, residual),
attention called with keyword arguments, linear layers returning (output, bias).
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

HIDDEN, HEADS, LAYERS, VOCAB = 32, 4, 2, 50
PLANT = "none"


class Linear(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5)

    def forward(self, input_: torch.Tensor) -> tuple[torch.Tensor, None]:
        return input_ @ self.weight.T, None


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(HIDDEN))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
        if residual is not None:
            x = x + residual
            residual = x
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return out if residual is None else (out, residual)


class RotaryEmbedding(nn.Module):
    def forward(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        angle = positions[:, None].float() * 0.1
        return query * torch.cos(angle), key * torch.cos(angle)


class Attention(nn.Module):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> Any:
        scores = (query @ key.T) / HIDDEN**0.5
        mask = torch.ones_like(scores, dtype=torch.bool).tril()
        return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ value


class LlamaAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv_proj = Linear(HIDDEN, 3 * HIDDEN)
        self.o_proj = Linear(HIDDEN, HIDDEN)
        self.rotary_emb = RotaryEmbedding()
        self.attn = Attention()

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([HIDDEN, HIDDEN, HIDDEN], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        attn_output = self.attn(q, k, v)
        output, _ = self.o_proj(attn_output)
        return output


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return nn.functional.silu(x[..., :half]) * x[..., half:]


class LlamaMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_up_proj = Linear(HIDDEN, 4 * HIDDEN)
        self.down_proj = Linear(2 * HIDDEN, HIDDEN)
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, _ = self.gate_up_proj(x)
        x = self.act_fn(x)
        x, _ = self.down_proj(x)
        return x


class LlamaDecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn = LlamaAttention()
        self.mlp = LlamaMLP()
        self.input_layernorm = RMSNorm()
        self.post_attention_layernorm = RMSNorm()

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        attend = residual if PLANT == "layer" else hidden_states
        hidden_states = self.self_attn(positions=positions, hidden_states=attend)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class LlamaModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(LlamaDecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """vLLM's @support_torch_compile, in eager mode: forward without torch's hooks."""
        return self.forward(*args, **kwargs)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: Any,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual)
            if PLANT == "between":
                hidden_states += residual
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class LogitsProcessor(nn.Module):
    def forward(self, lm_head: Linear, hidden_states: torch.Tensor) -> torch.Tensor:
        return lm_head(hidden_states)[0]


class LlamaForCausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = LlamaModel()
        self.lm_head = Linear(HIDDEN, VOCAB)
        self.logits_processor = LogitsProcessor()

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: Any = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.logits_processor(self.lm_head, hidden_states)


def main(worker_dir: str, plant: str) -> None:
    global PLANT
    PLANT = plant
    sys.path.insert(0, worker_dir)
    from llm_bisect_worker import Extension

    torch.manual_seed(0)
    worker = Extension()
    worker.model_runner = SimpleNamespace(model=LlamaForCausalLM())  # type: ignore[attr-defined]
    worker.rank = 0  # type: ignore[attr-defined]
    worker.llm_bisect_install(json.dumps({"sample": 16}))
    ids = torch.tensor([3, 14, 15, 9, 26, 5, 35, 8])
    with torch.inference_mode():
        net = worker.model_runner.model  # type: ignore[attr-defined]
        net.compute_logits(net(input_ids=ids, positions=torch.arange(len(ids))))
    print(json.dumps([worker.llm_bisect_collect()]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
