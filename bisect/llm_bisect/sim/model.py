"""The simulated model: what a healthy build answers, and what each fault does to it. Pure.

Text is split into word tokens (leading space kept, as BPE does); a token's
id is a hash of it and its logprob a function of (id, position), so a golden
recorded from one process is reproduced exactly by another, and teacher
forcing (scoring given token ids) agrees with generation. Faults:

    numerics        the text leaves the golden after 3 tokens; every logprob shifts by -0.8
    kernel-noise    logprobs move by at most 0.004 (benign kernel noise: must pass)
    null-content    content null, the answer left in the reasoning channel
    eos-ignored     the answer never ends: plain, varied prose after it until the budget
    ...             (see FAULTS in server.py)

GSM8K questions from the bundled set are answered right 90% of the time by a
healthy build, as a capable model would.

A thinking model (`thinking`: N words) first reasons N words of plain prose,
then closes its reasoning and answers; reasoning and content share one token
budget, as on vLLM, so a small budget cuts the answer off with content null.
`enable_thinking: false` (chat_template_kwargs) skips the reasoning. On an
`unclosed` prompt it reasons on and never answers, on every build. Logprobs
then cover every generated token, reasoning first.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import zlib
from dataclasses import dataclass, field
from functools import cache

from .shapes import WorkerEvent, WorkerResult, WorkerRow

EOS_ID = 1
_WORD = re.compile(r"\s*\S+")


_DEGENERATE = (
    "G now now now now now now now now now now now now now [ how are now } [ are now now "
    "now now now now now now now now now now now now now now now now now now now now now"
)
_ARITH = re.compile(r"(-?\d+)\s*([-+*x\u00d7])\s*(-?\d+)")


def _arith(prompt: str) -> tuple[str, str] | None:
    """(expression, value) of the first `A op B` in a prompt."""
    m = _ARITH.search(prompt)
    if not m:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return m.group(0), str(value)


def answer(prompt: str) -> tuple[str, str]:
    """The healthy build's (content, reasoning) for a prompt. Deterministic."""
    text = prompt.strip().lower()
    arith = _arith(prompt)
    if arith is not None:
        expression, value = arith
        return value, f"The question asks for {expression}. That is {value}."
    if text.startswith(("hello", "hi ", "hey")):
        return (
            "I'm doing well, thank you for asking! How can I help you today?",
            "The user greets me and asks how I am. I should reply warmly and offer help.",
        )
    words = [w for w in re.findall(r"[a-z]+", text) if len(w) > 3][:4]
    topic = " ".join(words) or "this"
    return (
        f"Here is a short answer about {topic}. It depends on a few simple ideas, "
        "which I explain in plain words, one step at a time, with an example at the end.",
        f"The user wants to know about {topic}. I will keep it short and clear.",
    )


def respond(prompt: str, fault: str) -> tuple[str | None, str]:
    """(content, reasoning) of this build, fault applied."""
    worked = gsm8k_answer(prompt, fault)
    content, reasoning = answer(prompt) if worked is None else (worked, "I add and subtract.")
    if fault == "degenerate-reasoning":
        return content[:12], _DEGENERATE
    if fault == "degenerate-content":
        return _DEGENERATE, reasoning
    if fault in ("null-content", "reasoning-parser"):
        return None, f"{reasoning} {content}"
    if fault == "garbled-math" and _arith(prompt) is not None:
        return " What is2 +", reasoning
    return content, reasoning


def _truncate(text: str | None, max_tokens: int) -> str | None:
    if text is None:
        return None
    words = text.split(" ")
    return " ".join(words[:max_tokens])


def tokens(text: str) -> list[str]:
    """Word tokens, each with its leading whitespace."""
    return _WORD.findall(text)


def token_id(token: str) -> int:
    return zlib.crc32(token.encode()) % 30000 + 10


def logprob(tid: int, position: int, fault: str = "none") -> float:
    """The logprob of token `tid` at absolute `position` (prompt included)."""
    base = -(0.01 + ((tid * 7 + position * 13) % 50) / 200)
    if fault == "numerics":
        return base - 0.8
    if fault == "nan-logprobs":  # the text stays the golden's; the numbers are gone
        return math.nan
    if fault == "kernel-noise":
        return base + (((tid + position) % 9) - 4) / 1000
    return base


def top_k(tid: int, position: int, k: int, fault: str) -> list[tuple[int, float]]:
    """The chosen token first, then k-1 unlikely alternatives."""
    lp = logprob(tid, position, fault)
    return [(tid, lp)] + [((tid + j) % 30000 + 10, lp - 2.0 - j) for j in range(1, k)]


def alternative_text(tid: int) -> str:
    """The text of a top-k alternative no answer chose: a word of its own, as a tokenizer
    would give it (the simulated vocabulary has a text for every id it shows)."""
    return " " + _THOUGHT_WORDS[tid % len(_THOUGHT_WORDS)]


@cache
def _gsm8k() -> dict[str, str]:
    # imported here: the checks package imports model.py (pydantic), which a server's start
    # need not pay for (a simulated server starts at every probe)
    from ..checks.gsm8k import load_problems

    return {p.question: p.answer for p in load_problems()}


def gsm8k_answer(prompt: str, fault: str) -> str | None:
    """A worked answer when the prompt holds a bundled GSM8K question; else None.

    In a few-shot prompt only the last question is asked; the others are examples."""
    asked = prompt.rsplit("Question:", 1)[-1]
    for question, answer in _gsm8k().items():
        if question in asked:
            h = zlib.crc32(question.encode()) % 10
            wrong = h == 0 or (fault == "numerics" and h < 6)
            value = int(answer) + 1 if wrong else int(answer)
            return f"Let me work through it step by step. The answer is {value}."
    return None


@dataclass(frozen=True)
class Generation:
    """One completion: text per channel and the content's tokens with logprobs."""

    content: str | None
    reasoning: str | None
    token_ids: list[int]
    """Generated tokens (reasoning first for a thinking model), EOS last when the text ended
    within max_tokens."""
    steps: list[list[tuple[int, float]]]
    """Per generated token: top-k (id, logprob), the chosen token first."""
    finish_reason: str
    texts: list[str] = field(default_factory=list)
    """Per generated token, its text."""


_THOUGHT_TEXT = (
    "the user wants a clear answer so I should first consider what they mean and then check "
    "each part carefully before writing anything down because a careless reply could miss "
    "an important detail about the question such as its scope or the words it uses maybe "
    "there is a simpler way to explain this idea with an example from daily life like water "
    "light weather animals cooking numbers maps trees rivers music letters colours stones "
    "time money school friends travel gardens bridges clocks windows paper bread salt iron "
    "glass wool rain snow wind fire earth moon stars sun sea hill road city village farm "
    "first second third next then finally also however although therefore instead perhaps "
    "likely surely rarely often always never sometimes quickly slowly gently plainly"
)
_THOUGHT_WORDS = _THOUGHT_TEXT.split()
END_THINK = "</think>"


def thoughts(prompt: str, words: int) -> str:
    """`words` words of plain, varied reasoning prose for a prompt. Deterministic."""
    rng = random.Random(zlib.crc32(prompt.encode()))
    out: list[str] = []
    while len(out) < words:
        sentence = [rng.choice(_THOUGHT_WORDS) for _ in range(rng.randint(7, 14))]
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        out += sentence
    return " ".join(out[:words])


def _run_on(prompt: str, max_tokens: int) -> list[str]:
    """What a build that never emits EOS writes after its answer: plain prose (not repetitive,
    so no degeneration rule sees it), more than any budget holds."""
    return tokens(" " + thoughts(prompt + " (run on)", max_tokens + 1))


def generate(
    prompt: str,
    fault: str,
    max_tokens: int,
    top: int = 5,
    prompt_len: int | None = None,
    *,
    thinking: int = 0,
    unclosed: bool = False,
) -> Generation:
    """What this build answers, cut to max_tokens, with token ids and top-k logprobs.

    `thinking`: words of reasoning before the answer (0: a model that does not think,
    or thinking switched off); `unclosed`: it reasons on without end.
    """
    if thinking:
        return _think(prompt, fault, max_tokens, top, prompt_len, thinking, unclosed)
    content, reasoning = respond(prompt, fault)
    if fault == "numerics" and content is not None and gsm8k_answer(prompt, fault) is None:
        head = tokens(content)[:3]
        content = "".join(head) + " but then the water falls down into the quiet valley below."
    start = len(tokens(prompt)) if prompt_len is None else prompt_len
    toks = tokens(content or "")
    if fault == "eos-ignored" and content is not None:
        toks += _run_on(prompt, max_tokens)
    finish = "stop"
    if len(toks) >= max_tokens:
        toks, finish = toks[:max_tokens], "length"
    ids = [token_id(t) for t in toks] + ([EOS_ID] if finish == "stop" else [])
    steps = [top_k(tid, start + i, max(top, 1), fault) for i, tid in enumerate(ids)]
    text = "".join(toks) if content is not None else None
    if reasoning is not None:
        reasoning = "".join(tokens(reasoning)[:max_tokens])
    texts = [*toks, "</s>"][: len(ids)]
    return Generation(text.strip() if text else text, reasoning, ids, steps, finish, texts)


def _think(
    prompt: str,
    fault: str,
    max_tokens: int,
    top: int,
    prompt_len: int | None,
    words: int,
    unclosed: bool,
) -> Generation:
    """A thinking model: reasoning, `</think>`, the answer; one budget for all of it."""
    content, short = respond(prompt, fault)
    if fault == "degenerate-reasoning" or unclosed:
        # Never closes: degenerate loops, or plain prose that goes on and on.
        endless = (
            _DEGENERATE if fault == "degenerate-reasoning" else thoughts(prompt, max_tokens + 1)
        )
        reasoning_toks = tokens(" ".join([endless] * (max_tokens // len(tokens(endless)) + 1)))
        answer_toks: list[str] = []
    else:
        reasoning_toks = tokens(thoughts(prompt, words) + " " + short)
        # null-content / reasoning-parser: the answer stays in the reasoning channel
        answer_toks = [" " + END_THINK, *(tokens(" " + content) if content is not None else [])]
        if fault == "eos-ignored":
            answer_toks += _run_on(prompt, max_tokens)
    stream = [*reasoning_toks, *answer_toks]
    finish = "stop"
    if len(stream) >= max_tokens:
        stream, finish = stream[:max_tokens], "length"
    n_reason = min(len(reasoning_toks), len(stream))
    reasoning = "".join(stream[:n_reason]).strip()
    closed = len(stream) > n_reason
    text: str | None = "".join(stream[n_reason + 1 :]).strip() if closed else None
    ids = [token_id(t) for t in stream] + ([EOS_ID] if finish == "stop" else [])
    start = len(tokens(prompt)) if prompt_len is None else prompt_len
    steps = [top_k(tid, start + i, max(top, 1), fault) for i, tid in enumerate(ids)]
    return Generation(text or None, reasoning, ids, steps, finish, [*stream, "</s>"][: len(ids)])


def score(token_ids: list[int], fault: str) -> list[float | None]:
    """Teacher forcing: the logprob of each given token (None for the first)."""
    return [None, *[logprob(tid, i, fault) for i, tid in enumerate(token_ids)][1:]]


SIM_LAYERS = 4
ENTERS = {
    "garbled-math": "model.layers.0.mlp",
    "degenerate-reasoning": "model.layers.1.self_attn",
    "numerics": "model.layers.2.mlp",
    "kernel-noise": "model.layers.2.self_attn",
    "degenerate-content": "model.layers.3.mlp",
}
"""Where each model-side fault enters the simulated network (`localize`); the others
(null content, the reasoning parser) are outside the model."""


ROOT = "<root>"
"""The worker extension's label for the model itself (LlamaForCausalLM)."""


def module_calls() -> list[str]:
    """The simulated network's modules in the order they finish (children first)."""
    calls = ["model.embed_tokens"]
    for i in range(SIM_LAYERS):
        layer = f"model.layers.{i}"
        calls += [f"{layer}.self_attn", f"{layer}.mlp", layer]
    return [*calls, "model.norm", "model", ROOT]


def modules() -> dict[str, dict[str, str]]:
    """Each module's class and caller, as the worker extension reports them: vLLM's Llama,
    whose `model.layers` (a ModuleList) runs no code, so `model` calls each layer."""
    found = {
        ROOT: {"type": "LlamaForCausalLM", "caller": ""},
        "model": {"type": "LlamaModel", "caller": ROOT},
        "model.embed_tokens": {"type": "VocabParallelEmbedding", "caller": "model"},
        "model.layers": {"type": "ModuleList", "caller": "model"},
        "model.norm": {"type": "RMSNorm", "caller": "model"},
    }
    for i in range(SIM_LAYERS):
        layer = f"model.layers.{i}"
        found[layer] = {"type": "LlamaDecoderLayer", "caller": "model"}
        found[f"{layer}.self_attn"] = {"type": "LlamaAttention", "caller": layer}
        found[f"{layer}.mlp"] = {"type": "LlamaMLP", "caller": layer}
    return found


def _tensor_events() -> list[tuple[str, str, str]]:
    """(module, kind, arg) of every tensor the hooks see, in execution order: a module's
    arguments by name when it is called, its outputs when it returns. vLLM calls a layer
    as `layer(positions, hidden_states, residual)` (no residual into the first) and
    attention with keyword arguments; a layer returns (hidden_states, residual)."""
    order = [(ROOT, "input", "input_ids"), (ROOT, "input", "positions"),
             ("model", "input", "input_ids"), ("model", "input", "positions"),
             ("model.embed_tokens", "input", "input_"),
             ("model.embed_tokens", "output", "")]  # fmt: skip
    for i in range(SIM_LAYERS):
        layer = f"model.layers.{i}"
        args = ["positions", "hidden_states"] + (["residual"] if i else [])
        order += [(layer, "input", a) for a in args]
        order += [(f"{layer}.self_attn", "input", "positions"),
                  (f"{layer}.self_attn", "input", "hidden_states"),
                  (f"{layer}.self_attn", "output", ""),
                  (f"{layer}.mlp", "input", "x"), (f"{layer}.mlp", "output", ""),
                  (layer, "output", "[0]"), (layer, "output", "[1]")]  # fmt: skip
    return [*order, ("model.norm", "input", "x"), ("model.norm", "input", "residual"),
            ("model.norm", "output", "[0]"), ("model.norm", "output", "[1]"),
            ("model", "output", ""), (ROOT, "output", "")]  # fmt: skip


def _values(module: str, tid: int, position: int, width: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(f"{module}|{tid}|{position}".encode()).digest()[:8])
    return [((seed >> (i % 48)) % 1000) / 500.0 - 1.0 + i * 1e-3 for i in range(width)]


def module_events(token_ids: list[int], fault: str, sample: int = 8) -> list[WorkerEvent]:
    """What the worker extension records for one forward over `token_ids`: every tensor
    each module is called with or returns, summarised per token position, in execution
    order. A model-side fault changes the output of the module it enters and everything
    after it."""
    enters = ENTERS.get(fault)
    order = _tensor_events()
    changed_from = next(
        (i for i, (m, kind, _) in enumerate(order) if m == enters and kind == "output"),
        len(order),
    )
    events: list[WorkerEvent] = []
    for index, (name, kind, arg) in enumerate(order):
        rows: list[WorkerRow] = []
        for position, tid in enumerate(token_ids):
            values = _values(f"{name}.{kind}{arg}", tid, position, sample)
            if index >= changed_from:
                values = [v * 0.5 + 0.3 for v in values]
            text = ",".join(f"{v:.6f}" for v in values)
            rows.append(
                {
                    "mean": sum(values) / len(values),
                    "norm": sum(v * v for v in values) ** 0.5,
                    "q": [min(values), max(values)],
                    "sample": values,
                    "hash": hashlib.sha1(text.encode()).hexdigest()[:16],
                }
            )
        events.append(
            {"module": name, "kind": kind, "arg": arg, "shape": [len(token_ids), 64],
             "nonfinite": 0, "rows": rows}
        )  # fmt: skip
    return events


def worker_result(token_ids: list[int], fault: str, sample: int = 8) -> WorkerResult:
    """What `llm_bisect_collect` returns for one simulated worker (rank 0)."""
    return {
        "rank": 0,
        "root": ROOT,
        "modules": modules(),
        "events": module_events(token_ids, fault, sample),
    }
