"""A small OpenAI-compatible client over httpx, with pinned greedy sampling.

Every reply is read with a byte cap and validated against pydantic models of
the parts of the OpenAI responses the checks use, here at the boundary: a
reply that does not fit (a `message` that is a string, `token_ids: ["abc"]`,
JSON nested past any sense) is an `EndpointError`, never a crash further in.

The transport is passed in (httpx's one seam), so tests can point it at a
real server on loopback or at `httpx.MockTransport`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import EndpointError, ReplyTooLarge, RequestRejected, ServerFault
from .model import (
    GREEDY,
    SEED as SEED,  # where tests and callers have always found it
    Step,
)

MAX_REPLY_BYTES = 32 * 2**20
"""Default cap on the bytes read of one reply (`server.max_reply_mb`)."""
ERROR_BODY_BYTES = 4096
"""Bytes of a non-200 reply's body kept for its error message."""


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _TopLogprob(_Reply):
    token: str
    logprob: float


class _TokenLogprob(_Reply):
    token: str
    logprob: float
    top_logprobs: list[_TopLogprob] = Field(default_factory=list)


class _ChoiceLogprobs(_Reply):
    content: list[_TokenLogprob] | None = None


class _Message(_Reply):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _ChatChoice(_Reply):
    message: _Message
    finish_reason: str | None = None
    logprobs: _ChoiceLogprobs | None = None
    token_ids: list[int] | None = None


class _Usage(_Reply):
    completion_tokens: int | None = None


class _ChatCompletion(_Reply):
    choices: list[_ChatChoice] = Field(min_length=1)
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = None
    usage: _Usage | None = None


class _ModelEntry(_Reply):
    id: str


class ModelList(_Reply):
    """`GET /v1/models`."""

    data: list[_ModelEntry]


class _PromptLogprob(_Reply):
    logprob: float


class _CompletionChoice(_Reply):
    prompt_logprobs: list[dict[str, _PromptLogprob] | None]


class _Completion(_Reply):
    choices: list[_CompletionChoice] = Field(min_length=1)


class _TextChoice(_Reply):
    text: str = ""
    finish_reason: str | None = None


class _TextCompletion(_Reply):
    choices: list[_TextChoice] = Field(min_length=1)
    usage: _Usage | None = None


class _Detokenized(_Reply):
    prompt: str


class _Tokenized(_Reply):
    tokens: list[int]


class _GeneratedChoice(_Reply):
    text: str = ""
    token_ids: list[int] | None = None


class _Generated(_Reply):
    choices: list[_GeneratedChoice] = Field(min_length=1)


class _RpcReply(_Reply):
    results: list[Any]


class _Version(_Reply):
    version: str | None = None


M = TypeVar("M", bound=BaseModel)


def parse_reply(model: type[M], body: bytes, what: str) -> M:
    """A reply body validated against `model`; EndpointError naming the first misfit."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise EndpointError(f"{what}: malformed reply ({where}: {err['msg']})") from None


@dataclass(frozen=True)
class ChatReply:
    """The parts of one chat completion the checks look at."""

    content: str | None
    """`message.content`; None when the server sent null."""
    reasoning: str | None
    """The reasoning channel, under `reasoning_content` or `reasoning`."""
    finish_reason: str | None
    steps: tuple[Step, ...] = ()
    """Per generated token, when logprobs were asked for: token (id when known), logprob, top-k."""
    token_ids: tuple[int, ...] = ()
    """Generated token ids (vLLM's `return_token_ids`)."""
    prompt_token_ids: tuple[int, ...] = ()
    """The prompt as the server tokenized it, chat template applied."""
    completion_tokens: int | None = None
    """Tokens generated, reasoning included (`usage.completion_tokens`), when the server says."""

    @property
    def cut(self) -> bool:
        """The budget ended the answer (`finish_reason: length`), not the model."""
        return self.finish_reason == "length"


def _key(token: str) -> str:
    """`token_id:123` (vLLM's return_tokens_as_token_ids) → `123`; other tokens as they are."""
    return token.removeprefix("token_id:")


ZERO_PROBABILITY = -9999.0
"""The logprob vLLM sends for a token of probability 0 (`max(logprob, -9999.0)` in
vllm/entrypoints/openai/serving_chat.py: OpenAI's JSON-serializable -inf)."""


def _logprob(value: float) -> float:
    """-inf as vLLM writes it (ZERO_PROBABILITY); NaN and +inf stay: no logprob is either, and
    the logprobs check names them."""
    return ZERO_PROBABILITY if value == -math.inf else value


def _steps(logprobs: _ChoiceLogprobs | None) -> tuple[Step, ...]:
    entries = (logprobs.content if logprobs else None) or []
    return tuple(
        Step(
            token=_key(e.token),
            logprob=_logprob(e.logprob),
            top={_key(t.token): _logprob(t.logprob) for t in e.top_logprobs},
        )
        for e in entries
    )


KEEPALIVE_S = 1.0
"""Seconds an idle connection is kept for the next request: well under the 5 s after which
uvicorn (vLLM's HTTP server) closes one, so a request rarely goes out on a closing connection
(httpx's own default, 5 s, races it exactly)."""


class OpenAIClient:
    """Chat completions against one endpoint."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout: float = 120.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        transport: httpx.BaseTransport | None = None,
        api_key: str | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url,
            timeout=timeout,
            transport=transport,
            # the key a server started with --api-key demands (never written anywhere)
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )
        self._model = model
        self.timeout = timeout
        """Seconds a whole request may take (each read's limit too)."""
        self.max_reply_bytes = max_reply_bytes
        self.system_fingerprint: str | None = None
        """The last `system_fingerprint` a completion carried (vLLM: `vllm-<version>-<commit>`)."""

    def __enter__(self) -> OpenAIClient:
        return self

    @property
    def base_url(self) -> str:
        """The server's address (`http://host:port`), for a tool that asks it itself (lm-eval)."""
        return str(self._http.base_url).rstrip("/")

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, *, cap: int | None = None, **kwargs: Any) -> bytes:
        """The body of a 200 reply, read up to the cap; EndpointError for anything else.

        A request the server closed its connection on before any reply began is sent once
        more on a fresh connection: a kept-alive connection the server ends (its keep-alive
        timeout) just as the request goes out looks exactly so. A server that really died
        refuses the second; one that drops every request drops it too: a ServerFault either way.
        """
        what = f"{method} {path}"
        for attempt in range(2):
            deadline = time.monotonic() + self.timeout  # the whole reply, every read included
            answered = False
            try:
                with self._http.stream(method, path, **kwargs) as response:
                    answered = True
                    if response.status_code != 200:
                        head = _read(response, ERROR_BODY_BYTES, what, cut=True, deadline=deadline)
                        text = head.decode("utf-8", "replace")
                        status = response.status_code
                        error = (
                            ServerFault
                            if status >= 500
                            else RequestRejected
                            if 400 <= status < 500
                            else EndpointError
                        )
                        raise error(f"{what}: HTTP {status}: {text[:200]}")
                    return _read(response, cap or self.max_reply_bytes, what, deadline=deadline)
            except httpx.TimeoutException as exc:
                raise EndpointError(f"{what}: {type(exc).__name__}: {exc}") from exc
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if attempt == 0 and not answered:
                    continue  # closed before any reply: once more, on a new connection
                raise ServerFault(f"{what}: {type(exc).__name__}: {exc}") from exc
            except httpx.TransportError as exc:  # reset, refused, dropped mid-reply
                raise ServerFault(f"{what}: {type(exc).__name__}: {exc}") from exc
            except httpx.HTTPError as exc:
                raise EndpointError(f"{what}: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def models(self) -> list[str]:
        """The model ids /v1/models lists."""
        body = self._request("GET", "/v1/models")
        return [m.id for m in parse_reply(ModelList, body, "GET /v1/models").data]

    def version(self) -> str | None:
        """What /version says (vLLM serves it); None when the server has no such route."""
        try:
            return parse_reply(_Version, self._request("GET", "/version"), "GET /version").version
        except EndpointError:
            return None

    @property
    def model(self) -> str:
        if self._model is None:
            ids = self.models()
            if not ids:
                raise EndpointError("GET /v1/models: the server lists no model")
            self._model = ids[0]
        return self._model

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        """One greedy chat completion of a single user message."""
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            **GREEDY,
            **extra,
        }
        what = "POST /v1/chat/completions"
        body = parse_reply(
            _ChatCompletion, self._request("POST", "/v1/chat/completions", json=payload), what
        )
        if body.system_fingerprint is not None:
            self.system_fingerprint = body.system_fingerprint
        choice = body.choices[0]
        message = choice.message
        return ChatReply(
            content=message.content,
            reasoning=message.reasoning_content
            if message.reasoning_content is not None
            else message.reasoning,
            finish_reason=choice.finish_reason,
            steps=_steps(choice.logprobs),
            token_ids=tuple(choice.token_ids or ()),
            prompt_token_ids=tuple(body.prompt_token_ids or ()),
            completion_tokens=body.usage.completion_tokens if body.usage else None,
        )

    def complete(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        """One greedy text completion of a raw prompt (no chat template: `/v1/completions`,
        as vLLM's own GSM8K runner asks); the text is the reply's content."""
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            **GREEDY,
            **extra,
        }
        what = "POST /v1/completions"
        body = parse_reply(
            _TextCompletion, self._request("POST", "/v1/completions", json=payload), what
        )
        choice = body.choices[0]
        return ChatReply(
            content=choice.text,
            reasoning=None,
            finish_reason=choice.finish_reason,
            completion_tokens=body.usage.completion_tokens if body.usage else None,
        )

    def detokenize(self, token_ids: list[int]) -> str | None:
        """The text of these token ids (vLLM's `/detokenize`); None where the server has none."""
        what = "POST /detokenize"
        try:
            body = self._request(
                "POST", "/detokenize", json={"model": self.model, "tokens": token_ids}
            )
        except RequestRejected:
            return None
        return parse_reply(_Detokenized, body, what).prompt

    def _complete_ids(self, token_ids: list[int], max_tokens: int, **extra: Any) -> bytes:
        """A greedy /v1/completions of a prompt given as token ids, seeded as every request
        is; the reply body."""
        body = {"model": self.model, "prompt": token_ids, "max_tokens": max_tokens,
                **GREEDY, **extra}  # fmt: skip
        return self._request("POST", "/v1/completions", json=body)

    def tokenize(self, text: str) -> list[int]:
        """The token ids of a text, as the server's tokenizer makes them (vLLM's `/tokenize`)."""
        body = self._request("POST", "/tokenize", json={"model": self.model, "prompt": text})
        return parse_reply(_Tokenized, body, "POST /tokenize").tokens

    def chat_tokens(self, messages: list[dict[str, str]]) -> list[int] | None:
        """The token ids of a conversation as the server's chat template renders it (vLLM's
        `/tokenize` with messages); None where the server has no such route."""
        payload = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        try:
            body = self._request("POST", "/tokenize", json=payload)
            return parse_reply(_Tokenized, body, "POST /tokenize").tokens
        except (RequestRejected, EndpointError):
            return None

    def continuation(self, token_ids: list[int], max_tokens: int) -> list[int]:
        """The greedy continuation of these tokens, as token ids (`return_token_ids`)."""
        body = self._complete_ids(token_ids, max_tokens, return_token_ids=True)
        choice = parse_reply(_Generated, body, "POST /v1/completions").choices[0]
        if choice.token_ids is not None:
            return choice.token_ids
        return self.tokenize(choice.text) if choice.text else []

    def rpc(self, method: str, *args: str, cap_bytes: int = 2**30) -> list[Any]:
        """vLLM's `/collective_rpc` (VLLM_SERVER_DEV_MODE=1): `method` in every worker, one
        result per worker."""
        body = self._request(
            "POST",
            "/collective_rpc",
            cap=cap_bytes,
            json={"method": method, "args": list(args)},
        )
        return parse_reply(_RpcReply, body, "POST /collective_rpc").results

    def score(self, token_ids: list[int]) -> list[float | None]:
        """Teacher forcing: each given token's logprob under this server (None for the first).

        Uses vLLM's `prompt_logprobs` on /v1/completions with the prompt as token ids.
        """
        body = self._complete_ids(token_ids, 1, prompt_logprobs=0)
        rows = parse_reply(_Completion, body, "POST /v1/completions").choices[0].prompt_logprobs
        out: list[float | None] = []
        for tid, row in zip(token_ids, rows, strict=False):
            entry = row.get(str(tid)) if row is not None else None
            out.append(_logprob(entry.logprob) if entry is not None else None)
        return out


def within(chunks: Iterable[bytes], deadline: float) -> Iterator[bytes]:
    """A streamed body's chunks until the monotonic `deadline`, then httpx.ReadTimeout.

    httpx's timeouts are per read: a server that trickles a byte a second never trips
    one, so every caller bounds the whole reply this way (the wait ends at most one read
    past the deadline)."""
    for chunk in chunks:
        yield chunk
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the reply took past its whole deadline")


def _read(
    response: httpx.Response,
    cap: int,
    what: str,
    *,
    cut: bool = False,
    deadline: float = math.inf,
) -> bytes:
    """At most `cap` bytes of a streamed body: cut there (`cut`), else ReplyTooLarge past it;
    httpx.ReadTimeout past the `deadline`."""
    declared = response.headers.get("Content-Length", "")
    if not cut and declared.isdigit() and int(declared) > cap:
        raise ReplyTooLarge(what, cap, int(declared))
    chunks: list[bytes] = []
    size = 0
    for chunk in within(response.iter_bytes(), deadline):
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            if cut:
                break
            raise ReplyTooLarge(what, cap, None)
    return b"".join(chunks)[:cap]
