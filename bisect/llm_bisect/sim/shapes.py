"""The documents the simulated engine reads and writes, as typed shapes: its settings
(a commit's sim-engine.json), the OpenAI-style requests it reads and the replies it sends,
and what its worker extension records. Only the keys the simulator uses; every key
optional, as a JSON file or a client may leave any out. Values only."""

from __future__ import annotations

from typing import Literal, TypedDict


class FaultRule(TypedDict, total=False):
    """A `fault_when` rule: this fault where the server's flags and environment match."""

    flags: dict[str, str | int | float | bool]
    env: dict[str, str | int | float | bool]
    fault: str


class Hostile(TypedDict, total=False):
    """How an engine misbehaves on purpose (sim-engine.json's `hostile`)."""

    say: str
    pad: int
    echo_env: list[str]
    error_env: list[str]
    models: str
    reply: str
    trickle: bool
    hang: bool
    default_sigterm: bool
    escape: bool


class EngineSettings(TypedDict, total=False):
    """A commit's sim-engine.json (or --engine-file)."""

    fault: str
    fault_when: list[FaultRule]
    startup_delay: float
    crash_first: int
    crash_trailer: int
    snapshot: str
    loads: list[str]
    print_env: list[str]
    print_env_at: int
    unknown_env: list[str]
    log_lines: list[str]
    hold_file: str
    hold_unless_env: str
    hostile: Hostile
    reasoning_field: str
    thinking: int
    unclosed: list[str]
    chat_template: str
    rpc: bool
    attention_backend: str
    moe_backend: str
    gemm_kernel: str
    cudagraph_mode: str
    packages: dict[str, str]
    """sim/collect_env's versions."""


class ChatMessage(TypedDict, total=False):
    role: str
    content: str


class Request(TypedDict, total=False):
    """A POST's body: chat, completions, (de)tokenize, or the workers' collective_rpc."""

    model: str
    messages: list[ChatMessage]
    prompt: str | list[int]
    max_tokens: int
    top_logprobs: int
    logprobs: bool
    chat_template_kwargs: dict[str, bool]
    return_tokens_as_token_ids: bool
    return_token_ids: bool
    prompt_logprobs: int
    stop: list[str]
    tokens: list[int]
    method: str
    args: list[str]


class TopLogprob(TypedDict):
    token: str
    logprob: float


class TokenLogprob(TypedDict):
    token: str
    logprob: float
    top_logprobs: list[TopLogprob]


class Logprobs(TypedDict):
    content: list[TokenLogprob]


class PromptLogprob(TypedDict):
    logprob: float
    rank: int


class Choice(TypedDict, total=False):
    index: int
    message: dict[str, str | None]
    """role, content and the build's reasoning field (its name varies)."""
    text: str
    finish_reason: str | None
    logprobs: Logprobs
    token_ids: list[int]
    prompt_logprobs: list[dict[str, PromptLogprob] | None]


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int


class Reply(TypedDict, total=False):
    """A chat or text completion."""

    id: str
    object: Literal["chat.completion", "text_completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[Choice]
    usage: Usage
    prompt_token_ids: list[int]


class WorkerRow(TypedDict):
    mean: float
    norm: float
    q: list[float]
    sample: list[float]
    hash: str


class WorkerEvent(TypedDict):
    module: str
    kind: str
    arg: str
    shape: list[int]
    nonfinite: int
    rows: list[WorkerRow]


class WorkerResult(TypedDict, total=False):
    """What one worker's `llm_bisect_collect` returns (rank 0's)."""

    rank: int
    root: str
    modules: dict[str, dict[str, str]]
    events: list[WorkerEvent]


class RpcReply(TypedDict):
    results: list[WorkerResult | dict[str, int]]
