"""The OpenAI client against the simulated server on loopback (in a thread)."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from llm_bisect.client import OpenAIClient
from llm_bisect.errors import EndpointError, ReplyTooLarge, RequestRejected, ServerFault
from llm_bisect.sim.server import Engine, serve

COMMIT = "cd" * 20


@contextmanager
def sim(fault: str = "none", reasoning_field: str = "reasoning", **hostile: Any) -> Iterator[str]:
    server = serve(Engine(COMMIT, fault, reasoning_field, hostile), 0)
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
        assert client.system_fingerprint is not None
        assert client.system_fingerprint.endswith(COMMIT[:12])
    assert reply.content is not None and reply.content.startswith("I'm doing well")
    assert reply.reasoning is not None and "greets me" in reply.reasoning


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


NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("reply", "where"),
    [
        ('{"choices": [{"message": "hello"}]}', "choices.0.message"),
        ('{"choices": [{"message": {"content": "4"}, "token_ids": ["abc"]}]}', "token_ids.0"),
        (
            '{"choices": [{"message": {"content": "4"}, "logprobs": {"content": '
            '[{"token": "4", "logprob": "x"}]}}]}',
            "logprobs.content.0.logprob",
        ),
        ('{"choices": []}', "choices"),
        ('{"choices": ' + NESTED + "}", "body"),
        ("not json at all", "body"),
        ("[1, 2]", "body"),
    ],
)
def test_a_reply_that_does_not_fit_is_an_endpoint_error(reply: str, where: str) -> None:
    with (
        sim(reply=reply) as url,
        OpenAIClient(url, model="m") as client,
        pytest.raises(EndpointError, match="malformed reply") as err,
    ):
        client.chat("What is 2+2?", max_tokens=8)
    assert where in str(err.value) or where == "body"


def test_a_models_list_nested_past_sense_is_an_endpoint_error() -> None:
    with (
        sim(models='{"data": ' + NESTED + "}") as url,
        OpenAIClient(url) as client,
        pytest.raises(EndpointError, match="GET /v1/models: malformed reply"),
    ):
        client.models()


def test_replies_are_read_up_to_a_cap_whatever_they_declare() -> None:
    with (
        sim(pad=2_000_000) as url,
        OpenAIClient(url, model="m", max_reply_bytes=1_000_000) as client,
        pytest.raises(ReplyTooLarge, match="over the cap of 1000000 bytes"),
    ):
        client.chat("hello how are you", max_tokens=8)

    def endless(request: httpx.Request) -> httpx.Response:
        chunks = (b"x" * 65536 for _ in range(10_000))  # 655 MB, if anyone read it all
        return httpx.Response(200, content=chunks)

    transport = httpx.MockTransport(endless)
    with (
        OpenAIClient("http://sim", model="m", max_reply_bytes=1_000_000, transport=transport) as c,
        pytest.raises(ReplyTooLarge, match="the reply ran past the cap of"),
    ):
        c.chat("hi", max_tokens=8)


def test_a_refused_request_is_request_rejected_and_detokenize_is_optional() -> None:
    with sim() as url, OpenAIClient(url) as client:
        reply = client.chat("hello how are you", max_tokens=64)
        assert reply.completion_tokens == len(
            client.chat("hello how are you", max_tokens=64, return_token_ids=True).token_ids
        )
        with pytest.raises(RequestRejected, match="HTTP 400"):
            client._request("POST", "/v1/completions", json={"prompt": {"neither": "text nor ids"}})
        assert client.detokenize([1]) == "</s>"

    def no_route(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    with OpenAIClient("http://x", model="m", transport=httpx.MockTransport(no_route)) as client:
        assert client.detokenize([1, 2]) is None


class _ClosingIdle:
    """A loopback HTTP/1.1 server that answers the first request of each connection with
    keep-alive and closes the connection, unanswered, when a further request arrives on it:
    what uvicorn (vLLM's server) does when its keep-alive timeout ends just as the client
    sends on the connection it kept. `drop_all` closes every request unanswered (a crash)."""

    def __init__(self, drop_all: bool = False) -> None:
        import socket

        self.drop_all = drop_all
        self.bodies: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: Any) -> None:
        reader = conn.makefile("rb")
        served = 0
        with conn, reader:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    byte = reader.read(1)
                    if not byte:
                        return
                    head += byte
                length = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                self.bodies.append(reader.read(length))
                if self.drop_all or served:
                    return  # closed, unanswered
                served += 1
                reply = b'{"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}]}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(reply)}\r\n\r\n".encode()
                    + reply
                )

    def close(self) -> None:
        self.sock.close()


def test_a_kept_connection_the_server_closed_as_the_request_went_out_is_sent_again() -> None:
    server = _ClosingIdle()
    try:
        with OpenAIClient(server.url, model="m") as client:
            assert client.chat("2+2?", max_tokens=4).content == "4"
            assert client.chat("2+2?", max_tokens=4).content == "4"  # kept connection: closed
        assert len(server.bodies) == 3 and server.bodies[1] == server.bodies[2]
    finally:
        server.close()


def test_a_server_that_drops_every_request_is_still_a_server_fault() -> None:
    server = _ClosingIdle(drop_all=True)
    try:
        with (
            OpenAIClient(server.url, model="m") as client,
            pytest.raises(ServerFault, match="Server disconnected"),
        ):
            client.chat("2+2?", max_tokens=4)
        assert len(server.bodies) == 2  # sent once more on a fresh connection, then given up
    finally:
        server.close()


@contextmanager
def trickler() -> Iterator[str]:
    """A server that answers 200 and then sends its body a byte every 0.2 s, without end:
    no single read ever waits long enough for httpx's (per-read) timeout."""
    import socket

    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    def drip(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
                while not stop.wait(0.2):
                    conn.sendall(b" ")
            except OSError:
                return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def _ends(call: Any) -> BaseException | None:
    """What the call raised, or fail when it has not ended in 60 s (it once ran on for 500 s
    and more: the bound is the test's, not a guess at speed)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the read never ended"
    return raised[0] if raised else None


def test_a_reply_that_trickles_ends_at_the_request_timeout() -> None:
    with trickler() as url, OpenAIClient(url, timeout=1.0) as client:
        raised = _ends(client.models)
    assert isinstance(raised, EndpointError) and "deadline" in str(raised), raised


def test_an_index_page_that_trickles_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """`deps` once read such a page for over 100 s with its 30 s timeout."""
    from llm_bisect.errors import ConfigError
    from llm_bisect.services import deps

    monkeypatch.setattr(deps, "INDEX_TIMEOUT_S", 1.0)
    with trickler() as url:
        raised = _ends(lambda: deps._fetch(url + "/simple/x/", "text/html"))
    assert isinstance(raised, ConfigError) and "ReadTimeout" in str(raised), raised


def test_minus_infinity_is_read_as_vllm_writes_it_and_nan_stays_for_the_check() -> None:
    """vLLM sends -9999.0 for probability 0 (serving_chat.py); a server sending -Infinity
    once made `gate` an internal error. NaN is kept: the logprobs check names it."""
    body = ('{"choices": [{"message": {"content": "4"}, "logprobs": {"content": ['
            '{"token": "4", "logprob": -Infinity, "top_logprobs": ['
            '{"token": "5", "logprob": NaN}]}]}}]}')  # fmt: skip
    with sim(reply=body) as url, OpenAIClient(url) as client:
        (step,) = client.chat("hi", max_tokens=4, logprobs=True, top_logprobs=1).steps
    assert step.logprob == -9999.0 and math.isnan(step.top["5"])
