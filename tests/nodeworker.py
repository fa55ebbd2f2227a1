"""A multi-node probe's two sides in the Kubernetes tests, meeting as vLLM's do: its head
serves only once its workers joined.

    python nodeworker.py head PORT -- COMMAND...   waits for a worker on PORT + 1, then
                                                   runs COMMAND (the server, on PORT)
    python nodeworker.py worker HEAD PORT          joins the head at HEAD:PORT + 1 by the
                                                   address the launcher gave it, says so, and
                                                   stays until it is stopped, as a vLLM
                                                   `--headless` worker stays with its head
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

DEADLINE_S = 120.0


def head(port: int, command: list[str]) -> int:
    with socket.create_server(("0.0.0.0", port + 1)) as listener:
        print(f"head: waiting for a worker on {port + 1}", flush=True)
        listener.settimeout(DEADLINE_S)
        try:
            joined, _ = listener.accept()
        except TimeoutError:
            print("head: no worker joined", flush=True)
            return 1
        joined.close()
    print("head: the worker joined; serving", flush=True)
    os.execvp(command[0], command)


def worker(address: str, port: int) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 in its container
    print(f"worker: reaching {address}:{port}", flush=True)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            with socket.create_connection((address, port + 1), timeout=2):
                break
        except OSError as exc:  # the name not yet published, or the head not yet listening
            if time.monotonic() > deadline:
                print(f"worker: cannot reach {address}:{port}: {exc}", flush=True)
                return 1
            time.sleep(0.05)
    print(f"worker: connected to {address}:{port}", flush=True)
    signal.pause()
    return 0


def main() -> int:
    if sys.argv[1] == "head":
        return head(int(sys.argv[2]), sys.argv[sys.argv.index("--") + 1 :])
    return worker(sys.argv[2], int(sys.argv[3]))


if __name__ == "__main__":
    sys.exit(main())
