"""The simulated engine: an OpenAI-compatible HTTP server on the standard library.

It plays one build of a serving engine. What the build does wrong is read
from the commit it serves: `git show COMMIT:sim-engine.json` in the repo,
e.g. `{"fault": "degenerate-reasoning"}`. So a temporary git history with a
fault introduced by one commit is a real bisection problem.

Faults (FAULTS; what each does to the output is in sim/model.py): output
faults keep /health green, as in the real reports;
`crash-on-start`, `never-ready` and `crash-on-request` make a build untestable
(`crash_trailer`: characters of one line `crash-on-start` prints after its reason;
`crash_first`: N, its first N starts crash on start, as counted by `--launch-log`);
`bad-warmup` is broken for its first requests only (checks disagree across repeats).

A commit's `thinking` (words of reasoning before each answer) makes it a
thinking model that honours `chat_template_kwargs: {"enable_thinking": false}`;
`unclosed` lists prompts it reasons on without end, on every build. A commit's
`chat_template` (`{content}` where each message goes) is how /tokenize renders a
conversation, as vLLM's TokenizeChatRequest applies the model's template.

A commit's `hostile` settings (HOSTILE) make a server misbehave in ways no
real engine should, to show the harness survives them: a raw `reply` body,
a raw `models` list, `pad` characters of content, `say` (a text put before
the content: markup, control characters), `echo_env` (values of these
variables in the content), `error_env` (a 500 whose body holds them), `hang`
(POST requests never answered), `trickle` (POST answered a byte every 0.2 s, without end),
`default_sigterm` (no handler: as PID 1 in a
container, SIGTERM is then ignored), `escape` (a child that
leaves the process group with setsid and outlives its parent). A commit's
`log_lines` are printed at startup as they are (escapes, fences, markup). A commit's
`hold_file` keeps its server from listening while that file exists, so a test
can stop a run at a known probe without guessing how long anything takes (except in a
server whose environment sets the variable `hold_unless_env` names: one setup of two).
A commit's `unknown_env` names variables the build does not know: set, each is warned of
at startup as vLLM's envs.py does. `--request-log FILE` appends each POST (its path, its
body, the POSTs in flight then) as a JSON line, so a test reads what the checks really sent.

A commit's `fault_when` plays a fault of one setup only, as the GLM case's MoE backend
did: a list of `{"flags": {"--moe-backend": "cutlass"}, "env": {"VLLM_USE_DEEP_GEMM": "1"},
"fault": "garbled-math"}`; the first rule whose flags (the words after each, joined by a
space; "" for a bare switch) and variables all match the server's own decides the fault.
The server takes any other `--flag [value]` as vLLM would, for these rules to read.

A commit's `loads` lists the engine files its server reports as executed
(`vllm/model_executor/models/llama.py`): written through the path hook's channel (loads.py)
where the harness set it, as a real server's imports are (the golden's record, priors.py).

A commit's `snapshot` (40 hex) is the revision of the model's files it loads: at start,
given `--model ORG/NAME`, it writes the hub cache (`--download-dir`, else HF_HUB_CACHE, ...)
as huggingface_hub's snapshot_download does where the hub's ref moved: `snapshots/<hex>/`
and `refs/<--revision or main>`.

With VLLM_CACHE_ROOT set, a start compiles as vLLM does, into
`torch_compile_cache/<hash of the commit>/rank_0_0/backbone`, or loads that folder when it
is there (and says which, in vLLM's words): the engine cache's hits are real files.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, cast

from .. import loads, weights
from ..delta import flag_groups, last_copy
from ..errors import ConfigError
from . import model
from .shapes import (
    ChatMessage,
    Choice,
    EngineSettings,
    Hostile,
    Reply,
    Request,
    RpcReply,
    WorkerResult,
)

FAULTS = (
    "none",
    "degenerate-reasoning",
    "degenerate-content",
    "null-content",
    "garbled-math",
    "crash-on-start",
    "never-ready",
    "crash-on-request",
    "bad-warmup",
    "numerics",
    "kernel-noise",
    "reasoning-parser",
    "eos-ignored",
    "nan-logprobs",
)
WARMUP_REQUESTS = 4
DEFAULT_TEMPLATE = "<user>{content}<assistant>"
"""How /tokenize renders each message of a conversation (a commit's `chat_template`)."""
"""`bad-warmup` answers its first this-many chat requests with degenerate content."""
ENGINE_FILE = "sim-engine.json"
MODEL = "sim/tiny-chat"


def _token_text(tid: int, as_ids: bool, text: str) -> str:
    return f"token_id:{tid}" if as_ids else text


HOSTILE = (
    "reply",
    "models",
    "pad",
    "echo_env",
    "error_env",
    "hang",
    "trickle",
    "default_sigterm",
    "escape",
)


class Engine:
    """What one build is: its commit, fault and reasoning field name."""

    def __init__(
        self,
        commit: str,
        fault: str,
        reasoning_field: str,
        hostile: Hostile | None = None,
        *,
        thinking: int = 0,
        unclosed: tuple[str, ...] = (),
        chat_template: str = DEFAULT_TEMPLATE,
    ) -> None:
        self.chat_template = chat_template
        """How /tokenize renders a conversation (a commit's `chat_template` changes it)."""
        self.commit = commit
        self.fault = fault
        self.reasoning_field = reasoning_field
        self.hostile = hostile or {}
        self.thinking = thinking
        self.unclosed = unclosed
        self.vocab: dict[int, str] = {model.EOS_ID: "</s>"}
        """Every token id this engine produced or read, and its text (for /detokenize)."""
        self.ready = fault != "never-ready"
        self.requests = 0
        self._lock = threading.Lock()
        self.extension = False
        self.api_key: str | None = None
        """The key every /v1 request must carry (`--api-key`, VLLM_API_KEY), as vLLM's."""
        """Started as vLLM with `--worker-extension-cls` and VLLM_SERVER_DEV_MODE=1: it
        answers /collective_rpc as llm-bisect's worker extension does."""
        self._armed: dict[str, int] | None = None
        self._recorded: WorkerResult | None = None
        self.request_log: Path | None = None
        """Where each POST is written as it comes (`--request-log`): a JSON line with its path,
        its body and the POSTs in flight then, itself included."""
        self.in_flight = 0

    @contextlib.contextmanager
    def received(self, path: str, body: Any) -> Iterator[None]:
        """One POST in flight, logged to `request_log` as it begins."""
        with self._lock:
            self.in_flight += 1
            if self.request_log is not None:
                line = {"path": path, "body": body, "in_flight": self.in_flight}
                with self.request_log.open("a") as f:
                    f.write(json.dumps(line) + "\n")
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def _envelope(
        self, kind: Literal["chat.completion", "text_completion"], body: Request, choice: Choice
    ) -> Reply:
        return {
            "id": f"{kind}-{self.commit[:8]}",
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "system_fingerprint": f"sim-0.1.0-{self.commit[:12]}",
            "choices": [choice],
        }

    def chat(self, body: Request) -> Reply:
        messages = body.get("messages") or [ChatMessage()]
        prompt = str(messages[-1].get("content", ""))
        max_tokens = int(body.get("max_tokens") or 256)
        with self._lock:
            self.requests += 1
            warming = self.requests <= WARMUP_REQUESTS
        fault = "degenerate-content" if self.fault == "bad-warmup" and warming else self.fault
        k = int(body.get("top_logprobs") or 1)
        template = body.get("chat_template_kwargs") or {}
        thinks = self.thinking if template.get("enable_thinking", True) is not False else 0
        gen = model.generate(
            prompt,
            fault,
            max_tokens,
            k,
            thinking=thinks,
            unclosed=bool(thinks) and any(u in prompt for u in self.unclosed),
        )
        prompt_toks = model.tokens(prompt)
        prompt_ids = [model.token_id(t) for t in prompt_toks]
        with self._lock:
            self.vocab.update(zip(prompt_ids, prompt_toks, strict=True))
            self.vocab.update(zip(gen.token_ids, gen.texts, strict=False))
            # every build shares one tokenizer: the healthy build's tokens are known too
            healthy = model.generate(prompt, "none", max_tokens, k, thinking=thinks)
            self.vocab.update(zip(healthy.token_ids, healthy.texts, strict=False))
            for tid, _ in (alt for g in (gen, healthy) for step in g.steps for alt in step[1:]):
                self.vocab.setdefault(tid, model.alternative_text(tid))
        content = gen.content
        if content is not None and self.hostile.get("say"):
            content = str(self.hostile["say"]) + content
        if content is not None and self.hostile.get("pad"):
            content += "x" * int(self.hostile["pad"])
        if content is not None and self.hostile.get("echo_env"):
            content += "".join(f" {n}={os.environ.get(n, '')}" for n in self.hostile["echo_env"])
        message: dict[str, str | None] = {
            "role": "assistant",
            "content": content,
            # a thinking model with thinking switched off says nothing in reasoning
            self.reasoning_field: gen.reasoning if thinks or not self.thinking else None,
        }
        choice: Choice = {
            "index": 0,
            "message": message,
            "finish_reason": gen.finish_reason,
        }
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        if body.get("logprobs"):
            texts = gen.texts
            choice["logprobs"] = {
                "content": [
                    {
                        "token": _token_text(step[0][0], as_ids, texts[i]),
                        "logprob": step[0][1],
                        "top_logprobs": [
                            {
                                "token": _token_text(
                                    tid, as_ids, texts[i] if j == 0 else self.vocab[tid]
                                ),
                                "logprob": lp,
                            }
                            for j, (tid, lp) in enumerate(step[:k])
                        ],
                    }
                    for i, step in enumerate(gen.steps)
                ]
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = gen.token_ids
        reply = self._envelope("chat.completion", body, choice)
        reply["usage"] = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(gen.token_ids)}
        if body.get("return_token_ids"):
            reply["prompt_token_ids"] = prompt_ids
        return reply

    def detokenize(self, body: Request) -> dict[str, str]:
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ValueError("tokens: a list of token ids")
        with self._lock:
            return {"prompt": "".join(self.vocab.get(t, "") for t in ids)}

    def tokenize(self, body: Request) -> dict[str, int | list[int]]:
        text = str(body.get("prompt", ""))
        if isinstance(body.get("messages"), list):  # vLLM's TokenizeChatRequest
            text = "".join(
                self.chat_template.replace("{content}", str(m.get("content", "")))
                for m in body["messages"]
                if isinstance(m, dict)
            )
        toks = model.tokens(text)
        ids = [model.token_id(t) for t in toks]
        with self._lock:
            self.vocab.update(zip(ids, toks, strict=True))
        return {"count": len(ids), "tokens": ids}

    def rpc(self, body: Request) -> RpcReply:
        """The worker extension's methods, for one simulated worker (rank 0)."""
        method = body.get("method")
        with self._lock:
            if method == "llm_bisect_install":
                spec = json.loads((body.get("args") or ["{}"])[0])
                self._armed, self._recorded = spec, None
                return {"results": [{"rank": 0, "modules": len(model.modules())}]}
            if method == "llm_bisect_collect":
                recorded, self._armed, self._recorded = self._recorded, None, None
                return {"results": [recorded or {"rank": 0, "events": []}]}
        raise ValueError(f"no method {method!r} on the workers")

    def text_completion(self, body: Request) -> Reply:
        """A raw text prompt completed (no chat template): the build's answer as one text,
        cut at the first of the request's `stop` strings (not included, as vLLM does)."""
        prompt = str(body.get("prompt"))
        with self._lock:
            self.requests += 1
        gen = model.generate(prompt, self.fault, int(body.get("max_tokens") or 16), 1)
        text, finish = gen.content if gen.content is not None else gen.reasoning or "", None
        stops = [s for s in body.get("stop") or [] if isinstance(s, str) and s and s in text]
        if stops:
            text = text[: min(text.index(s) for s in stops)]
            finish = "stop"
        choice: Choice = {"index": 0, "text": text, "finish_reason": finish or gen.finish_reason}
        reply = self._envelope("text_completion", body, choice)
        reply["usage"] = {"prompt_tokens": len(model.tokens(prompt)),
                          "completion_tokens": len(model.tokens(text))}  # fmt: skip
        return reply

    def completion(self, body: Request) -> Reply:
        """Teacher forcing: a prompt of token ids scored with `prompt_logprobs`; a text prompt
        completed (`text_completion`)."""
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return self.text_completion(body)
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            raise ValueError("the simulator completes a text or scores token ids")
        with self._lock:
            if self._armed is not None:
                sample = int(self._armed.get("sample", 8))
                self._recorded = model.worker_result(prompt, self.fault, min(sample, 16))
        choice: Choice = {"index": 0, "text": "", "finish_reason": "length"}
        wanted = int(body.get("max_tokens") or 1)
        if body.get("return_token_ids"):  # a greedy continuation: the same on every build
            seed = sum(prompt) % 997
            choice["token_ids"] = [100 + (seed + 7 * i) % 50 for i in range(wanted)]
        if body.get("prompt_logprobs") is not None:
            scores = model.score(prompt, self.fault)
            choice["prompt_logprobs"] = [
                None if lp is None else {str(tid): {"logprob": lp, "rank": 1}}
                for tid, lp in zip(prompt, scores, strict=True)
            ]
        return self._envelope("text_completion", body, choice)


def _handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes; without this, Nagle's
            # algorithm and delayed ACKs add ~40 ms to every response.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(
                f"sim: {self.command} {self.path} {args[1] if len(args) > 1 else ''}\n"
            )

        def _send(self, status: int, body: Mapping[str, object] | str) -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refused(self) -> bool:
            """vLLM answers a /v1 request without the server's key 401."""
            wanted = f"Bearer {engine.api_key}"
            if engine.api_key is None or not self.path.startswith("/v1"):
                return False
            if self.headers.get("Authorization") == wanted:
                return False
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self._send(401, {"error": "Unauthorized"})
            return True

        def do_GET(self) -> None:
            if self._refused():
                return
            if self.path == "/health":
                self._send(200 if engine.ready else 503, {})
            elif self.path == "/v1/models" and "models" in engine.hostile:
                self._send(200, str(engine.hostile["models"]))
            elif self.path == "/v1/models":
                data = [{"id": MODEL, "object": "model"}] if engine.ready else []
                self._send(200, {"object": "list", "data": data})
            elif self.path == "/version":
                self._send(200, {"version": f"0.1.0+g{engine.commit[:12]}"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self._refused():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"error": "invalid JSON"})
                return
            with engine.received(self.path, body):
                self._post(body)

        def _post(self, body: Any) -> None:
            served = ("/v1/chat/completions", "/v1/completions", "/detokenize", "/tokenize")
            if self.path == "/collective_rpc" and engine.extension:
                try:
                    self._send(200, engine.rpc(body))
                except ValueError as exc:
                    self._send(500, {"error": str(exc)})
                return
            if self.path not in served:
                self._send(404, {"error": "not found"})
                return
            hostile = engine.hostile
            if hostile.get("trickle"):  # 200, then a byte every 0.2 s: no read ever times out
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                with contextlib.suppress(OSError):
                    while True:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.2)
                return
            if hostile.get("hang"):
                sys.stderr.write("sim: holding request (hang)\n")
                sys.stderr.flush()
                threading.Event().wait()
            if hostile.get("error_env"):
                names = hostile["error_env"]
                text = " ".join(f"{n}={os.environ.get(n, '')}" for n in names)
                self._send(500, {"error": f"internal error, env: {text}"})
                return
            if "reply" in hostile:
                self._send(200, str(hostile["reply"]))
                return
            if engine.fault == "crash-on-request":
                sys.stderr.write("sim: illegal memory access (simulated), aborting\n")
                sys.stderr.flush()
                os._exit(134)
            if self.path in ("/v1/completions", "/detokenize", "/tokenize"):
                serve = {
                    "/v1/completions": engine.completion,
                    "/detokenize": engine.detokenize,
                    "/tokenize": engine.tokenize,
                }[self.path]
                try:
                    self._send(200, serve(body))
                except ValueError as exc:
                    self._send(400, {"error": str(exc)})
                return
            self._send(200, engine.chat(body))

    return Handler


def startup_log(commit: str, settings: EngineSettings) -> list[str]:
    """Kernel-selection lines as vLLM prints them today (main 2026-08: vllm/v1/engine/core.py,
    platforms/cuda.py, fused_moe/oracle/nvfp4.py, kernels/linear), so fingerprints have
    something to read; a commit's settings switch a backend as a real change would."""
    attention = settings.get("attention_backend", "FLASH_ATTN")
    moe = settings.get("moe_backend", "TRITON")
    gemm = settings.get("gemm_kernel", "CutlassFP8ScaledMMLinearKernel")
    graphs = settings.get("cudagraph_mode", "FULL_AND_PIECEWISE")
    engine = f"(EngineCore_DP0 pid={os.getpid()}) INFO 08-09 09:00:00 [%s]"
    worker = f"(Worker_TP0 pid={os.getpid()}) INFO 08-09 09:00:00 [%s]"

    def candidates(chosen: str, listed: tuple[str, ...]) -> str:
        """The same list whichever is chosen: a switch changes the choice alone."""
        return str(list(listed) if chosen in listed else [chosen, *listed])

    return [
        f"{engine % 'core.py:123'} Initializing a V1 LLM engine (v0.1.0+g{commit[:12]}) with "
        "config: model='sim', dtype=torch.bfloat16, quantization=modelopt_fp4, "
        "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, compilation_config="
        f"{{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.{graphs}: "
        "(2, 1)>}",
        f"{worker % 'cuda.py:486'} Using {attention} attention backend out of potential "
        f"backends: {candidates(attention, ('FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN'))}.",
        f"{worker % '__init__.py:690'} Selected {gemm} for ModelOptNvFp4LinearMethod",
        f"{worker % 'nvfp4.py:216'} Using '{moe}' NvFp4 MoE backend out of potential backends: "
        f"{candidates(moe, ('FLASHINFER_TRTLLM', 'VLLM_CUTLASS', 'CUTLASS', 'TRITON', 'MARLIN'))}.",
    ]


def compile_cache(commit: str, root: str) -> None:
    """Load this commit's compiled graph from the cache under `root`, or compile it there
    (a file), as vLLM's compilation/backends.py logs each; nothing without a root."""
    if not root:
        return
    key = hashlib.sha256(commit.encode()).hexdigest()[:10]
    where = Path(root) / "torch_compile_cache" / key / "rank_0_0" / "backbone"
    if (where / "graph.bin").exists():
        print(f"sim: Directly load the compiled graph(s) from the cache {where}", flush=True)
        return
    where.mkdir(parents=True, exist_ok=True)
    (where / "graph.bin").write_text(commit)
    print(f"sim: Compiling a graph; saved to the cache {where}", flush=True)


def serve(engine: Engine, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """An HTTP server for one engine (port 0: any free port); not yet serving."""
    server = ThreadingHTTPServer((host, port), _handler(engine))
    server.daemon_threads = True
    return server


def engine_settings(repo: Path, commit: str) -> EngineSettings:
    """The sim-engine.json of a commit; {} when the commit has none."""
    result = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{ENGINE_FILE}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return {}
    settings = json.loads(result.stdout or "{}")
    return cast(EngineSettings, settings) if isinstance(settings, dict) else {}


def _escape(commit: str) -> None:
    """Leave behind a process in a session of its own whose parent is gone (double fork)."""
    script = (
        "import os, sys, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "print('sim: escaped as', os.getpid(), flush=True)\n"
        "time.sleep(3600)\n"
    )
    subprocess.run([sys.executable, "-c", script, f"escaped-{commit}"], check=True)


def _fault_when(
    settings: EngineSettings, flags: dict[str, tuple[str, ...]], env: Mapping[str, str]
) -> str | None:
    """The fault of the first `fault_when` rule this server's flags and environment match."""
    given = {name: " ".join(w for w in words[1:]) or words[0].partition("=")[2]
             for name, words in flags.items()}  # fmt: skip
    for rule in settings.get("fault_when", []):
        if all(given.get(f) == str(v) for f, v in rule.get("flags", {}).items()) and all(
            env.get(n) == str(v) for n, v in rule.get("env", {}).items()
        ):
            return str(rule["fault"])
    return None


def _starts(log: Path, commit: str | None = None) -> int:
    """Starts the launch log holds so far (of `commit` only, when given)."""
    try:
        return sum(1 for c in log.read_text().split() if commit is None or c == commit)
    except FileNotFoundError:
        return 0


def _lies(args: argparse.Namespace, number: int, mine: int) -> bool:
    """Whether start `number` (the `mine`-th of its commit) serves the other side's
    behaviour (--lie-rate, --lie-at, --lie-on, --lie-gpus)."""
    if str(number) in {x.strip() for x in str(args.lie_at).split(",")}:
        return True
    gpus, _, rate = str(args.lie_gpus).rpartition(":")
    if gpus and os.environ.get("CUDA_VISIBLE_DEVICES") == gpus:  # a bad GPU: it lies often
        draw = random.Random(f"{args.lie_seed}:{number}:gpu").random()
        if draw < float(rate or 1):
            return True
    commit, _, times = str(args.lie_on).partition(":")
    if commit and args.commit.startswith(commit) and mine <= int(times or 10**9):
        return True
    return bool(args.lie_rate) and random.Random(f"{args.lie_seed}:{number}").random() < float(
        args.lie_rate
    )


def _download(argv: list[str], snapshot: str, env: Mapping[str, str]) -> None:
    """The hub cache as snapshot_download leaves it having fetched `snapshot` of the model
    the command line names (a hub id): the snapshot's folder and the ref pointing at it."""
    wanted = weights.asked(argv)
    model = wanted.get("model", "")
    if not model or Path(model).expanduser().exists():
        return
    cache = Path(wanted.get("download_dir") or weights.hub_cache(env)).expanduser()
    repo = cache / ("models--" + model.replace("/", "--"))
    (repo / "snapshots" / snapshot).mkdir(parents=True, exist_ok=True)
    (repo / "snapshots" / snapshot / "config.json").write_text('{"model_type": "sim"}\n')
    ref = repo / "refs" / (wanted.get("revision") or "main")
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(snapshot)


def main(argv: list[str]) -> int:
    started = time.time()
    parser = argparse.ArgumentParser(prog="python -m llm_bisect.sim", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 inside a container")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--repo", type=Path, help="read the fault from COMMIT:sim-engine.json")
    parser.add_argument("--engine-file", type=Path, help="read the fault from this file instead")
    parser.add_argument("--fault", choices=FAULTS, help="override the commit's fault")
    parser.add_argument("--startup-delay", type=float, help="seconds before listening")
    parser.add_argument("--launch-log", type=Path, help="append the commit here on start")
    parser.add_argument("--request-log", type=Path, help="append each POST here, a JSON line")
    # a start that lies serves the other side's behaviour: nothing but repetition exposes it
    parser.add_argument(
        "--lie-rate",
        type=float,
        default=0.0,
        help="each start lies with this probability (seeded: --lie-seed, its number)",
    )
    parser.add_argument("--lie-seed", type=int, default=0)
    parser.add_argument("--lie-at", default="", help="starts that lie, by number (1, 2, ...)")
    parser.add_argument("--lie-on", default="", help="COMMIT:K: its first K starts lie")
    parser.add_argument("--lie-gpus", default="",
                        help="GPUS:RATE: a start on these GPUs (CUDA_VISIBLE_DEVICES, as a "
                        "slot's {gpus}) lies with this probability (a bad GPU)")  # fmt: skip
    parser.add_argument("--lie-fault", choices=FAULTS, default="degenerate-reasoning",
                        help="what a build without a fault serves when its start lies")  # fmt: skip
    # vLLM's flags that `localize` adds: the worker extension answers /collective_rpc
    parser.add_argument("--worker-extension-cls")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--no-enable-prefix-caching", action="store_true")
    args, rest = parser.parse_known_args(argv)
    try:
        _, groups = flag_groups(rest)
    except ConfigError as exc:
        parser.error(str(exc))
    extra = {name: last_copy(name, words) for name, words in groups.items()}  # as vLLM's

    settings: EngineSettings = {}
    if args.engine_file:
        settings = json.loads(args.engine_file.read_text())
    elif args.repo:
        settings = engine_settings(args.repo, args.commit)
    moe = extra.get("--moe-backend")
    if moe:  # vLLM's flag picks the MoE kernel its startup log names
        settings["moe_backend"] = (" ".join(moe[1:]) or moe[0].partition("=")[2]).upper()
    fault = (
        args.fault or _fault_when(settings, extra, os.environ) or str(settings.get("fault", "none"))
    )
    delay = (
        args.startup_delay
        if args.startup_delay is not None
        else float(settings.get("startup_delay", 0.0))
    )
    if args.launch_log:
        number = _starts(args.launch_log) + 1
        mine = _starts(args.launch_log, args.commit) + 1
        with args.launch_log.open("a") as f:
            f.write(args.commit + "\n")
        if fault != "crash-on-start" and _lies(args, number, mine):
            fault = args.lie_fault if fault == "none" else "none"
        if mine <= int(settings.get("crash_first", 0)):  # a start that glitches
            fault = "crash-on-start"
    if settings.get("snapshot"):
        _download(rest, str(settings["snapshot"]), os.environ)
    loads.write(str(f) for f in settings.get("loads", []))  # as vLLM's imports, through the hook
    print(f"sim: serving {args.commit[:12]} (fault: {fault}) on port {args.port}", flush=True)
    print(f"sim: started at {started:.6f}", flush=True)
    if args.worker_extension_cls:  # as vLLM logs them
        print(f"sim: non-default args: worker_extension_cls={args.worker_extension_cls!r}")
        module = args.worker_extension_cls.rpartition(".")[0]
        if importlib.util.find_spec(module) is None:  # vLLM's workers import it: not there,
            print(f"sim: ModuleNotFoundError: No module named {module!r}", flush=True)
            return 1  # the server never starts
    at = int(settings.get("print_env_at", 0))  # the value from this column: a long line
    for name in settings.get("print_env", []):  # a server that logs its environment
        head = f"sim: {name}="
        print(head.rjust(at, "."), os.environ.get(name, ""), sep="", flush=True)
    for name in settings.get("unknown_env", []):  # a build older than these variables
        if name in os.environ:
            print(f"(APIServer pid={os.getpid()}) WARNING 08-09 09:00:00 [envs.py:1744] "
                  f"Unknown vLLM environment variable detected: {name}", flush=True)  # fmt: skip
    for line in startup_log(args.commit, settings):
        print(line, flush=True)
    for line in settings.get("log_lines", []):
        print(line, flush=True)
    compile_cache(args.commit, os.environ.get("VLLM_CACHE_ROOT", ""))
    time.sleep(delay)
    hold = settings.get("hold_file")
    if os.environ.get(str(settings.get("hold_unless_env", ""))):
        hold = None
    if hold and Path(hold).exists():
        print(f"sim: held until {hold} is gone", flush=True)
        while Path(hold).exists():
            time.sleep(0.05)
    if fault == "crash-on-start":
        print("sim: RuntimeError: CUDA error: no kernel image is available (simulated)", flush=True)
        if settings.get("crash_trailer"):  # one long line after the reason (progress bars)
            print("#" * int(settings["crash_trailer"]), flush=True)
        return 3
    hostile = Hostile(**settings.get("hostile", {}))
    engine = Engine(
        args.commit,
        fault,
        str(settings.get("reasoning_field", "reasoning")),
        hostile,
        thinking=int(settings.get("thinking", 0)),
        unclosed=tuple(settings.get("unclosed", ())),
        chat_template=str(settings.get("chat_template", DEFAULT_TEMPLATE)),
    )
    engine.request_log = args.request_log
    key = extra.get("--api-key")
    engine.api_key = (
        (" ".join(key[1:]) or key[0].partition("=")[2]) if key else os.environ.get("VLLM_API_KEY")
    ) or None
    engine.extension = (
        bool(args.worker_extension_cls)
        and os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
        and settings.get("rpc", True) is not False  # false: an engine that is not vLLM
    )
    server = serve(engine, args.port, args.host)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # PID 1 in a container ignores SIGTERM unless handled

    if not hostile.get("default_sigterm"):
        signal.signal(signal.SIGTERM, stop)
    if hostile.get("escape"):
        _escape(args.commit)
    print(f"sim: listening at {time.time():.6f}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
