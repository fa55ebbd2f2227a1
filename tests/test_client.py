"""The OpenAI client against the simulated server on loopback (in a thread)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from llm_bisect.client import OpenAIClient
from llm_bisect.errors import EndpointError
from llm_bisect.sim.server import Engine, serve

COMMIT = "cd" * 20


@contextmanager
def sim(fault: str = "none", reasoning_field: str = "reasoning") -> Iterator[str]:
    server = serve(Engine(COMMIT, fault, reasoning_field), 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reads_the_reasoning_channel_under_either_name(field: str) -> None:
    with sim(reasoning_field=field) as url, OpenAIClient(url) as client:
        reply = client.chat("hello how are you", max_tokens=64)
    assert reply.content is not None and reply.content.startswith("I'm doing well")
    assert reply.reasoning is not None and "greets me" in reply.reasoning
    assert reply.raw["system_fingerprint"].endswith(COMMIT[:12])


def test_null_content_is_none_and_the_answer_sits_in_reasoning() -> None:
    with sim("null-content") as url, OpenAIClient(url) as client:
        reply = client.chat("What is 2+2?", max_tokens=64)
    assert reply.content is None
    assert reply.reasoning is not None and reply.reasoning.endswith("4")


def test_sampling_is_pinned_and_greedy() -> None:
    with sim() as url, OpenAIClient(url, model="sim/tiny-chat") as client:
        reply = client.chat("What is 2+2?", max_tokens=8)
    assert reply.content == "4"
    assert client.model == "sim/tiny-chat"


def test_errors_are_endpoint_errors() -> None:
    with sim() as url:
        pass
    with (
        OpenAIClient(url, model="m", timeout=1) as client,
        pytest.raises(EndpointError, match="POST /v1/chat/completions: ConnectError"),
    ):
        client.chat("hi", max_tokens=1)
    with sim() as url, OpenAIClient(url) as client, pytest.raises(EndpointError, match="HTTP 404"):
        client._request("GET", "/nope")
