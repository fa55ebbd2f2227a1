"""A small OpenAI-compatible client over httpx, with pinned greedy sampling.

The transport is passed in (httpx's one seam), so tests can point it at a
real server on loopback or at `httpx.MockTransport`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from .checks.compare import Step
from .errors import EndpointError

SEED = 1234
"""The sampling seed sent with every request."""


@dataclass(frozen=True)
class ChatReply:
    """The parts of one chat completion the checks look at."""

    content: str | None
    """`message.content`; None when the server sent null."""
    reasoning: str | None
    """The reasoning channel, under `reasoning_content` or `reasoning`."""
    finish_reason: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    """The whole response body."""
    steps: tuple[Step, ...] = ()
    """Per generated token, when logprobs were asked for: token (id when known), logprob, top-k."""
    token_ids: tuple[int, ...] = ()
    """Generated token ids (vLLM's `return_token_ids`)."""
    prompt_token_ids: tuple[int, ...] = ()
    """The prompt as the server tokenized it, chat template applied."""


def _key(token: str) -> str:
    """`token_id:123` (vLLM's return_tokens_as_token_ids) → `123`; other tokens as they are."""
    return token.removeprefix("token_id:")


def steps_of(choice: dict[str, Any]) -> tuple[Step, ...]:
    """The per-token logprobs of a chat choice, in OpenAI's format."""
    content = (choice.get("logprobs") or {}).get("content") or []
    return tuple(
        Step(
            token=_key(str(entry["token"])),
            logprob=float(entry["logprob"]),
            top={_key(str(t["token"])): float(t["logprob"]) for t in entry.get("top_logprobs", [])},
        )
        for entry in content
    )


def reasoning_of(message: dict[str, Any]) -> str | None:
    """The reasoning channel of a message; both names exist in the wild."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str):
            return value
    return None


class OpenAIClient:
    """Chat completions against one endpoint."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)
        self._model = model
        self.system_fingerprint: str | None = None
        """The last `system_fingerprint` a completion carried (vLLM: `vllm-<version>-<commit>`)."""

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise EndpointError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise EndpointError(
                f"{method} {path}: HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise EndpointError(f"{method} {path}: response is not JSON") from exc

    def models(self) -> list[str]:
        """The model ids /v1/models lists."""
        body = self._request("GET", "/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise EndpointError("GET /v1/models: no 'data' list in the response")
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]

    def version(self) -> str | None:
        """What /version says (vLLM serves it); None when the server has no such route."""
        try:
            body = self._request("GET", "/version")
        except EndpointError:
            return None
        value = body.get("version") if isinstance(body, dict) else None
        return str(value) if value is not None else None

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
            "temperature": 0.0,
            "top_p": 1.0,
            "seed": SEED,
            **extra,
        }
        body = self._request("POST", "/v1/chat/completions", json=payload)
        try:
            choice = body["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise EndpointError("POST /v1/chat/completions: no choices[0].message") from exc
        content = message.get("content")
        if isinstance(body.get("system_fingerprint"), str):
            self.system_fingerprint = body["system_fingerprint"]
        try:
            steps = steps_of(choice)
        except (KeyError, TypeError, ValueError) as exc:
            raise EndpointError(f"POST /v1/chat/completions: malformed logprobs ({exc})") from exc
        return ChatReply(
            content=content if isinstance(content, str) else None,
            reasoning=reasoning_of(message),
            finish_reason=choice.get("finish_reason"),
            raw=body,
            steps=steps,
            token_ids=tuple(int(t) for t in choice.get("token_ids") or ()),
            prompt_token_ids=tuple(int(t) for t in body.get("prompt_token_ids") or ()),
        )

    def score(self, token_ids: list[int]) -> list[float | None]:
        """Teacher forcing: each given token's logprob under this server (None for the first).

        Uses vLLM's `prompt_logprobs` on /v1/completions with the prompt as token ids.
        """
        body = self._request(
            "POST",
            "/v1/completions",
            json={
                "model": self.model,
                "prompt": token_ids,
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": 0,
            },
        )
        try:
            rows = body["choices"][0]["prompt_logprobs"]
            out: list[float | None] = []
            for tid, row in zip(token_ids, rows, strict=False):
                entry = row.get(str(tid)) if isinstance(row, dict) else None
                out.append(float(entry["logprob"]) if entry else None)
        except (KeyError, IndexError, TypeError) as exc:
            raise EndpointError("POST /v1/completions: no prompt_logprobs in the response") from exc
        return out
