"""A multi-node probe's worker in the Kubernetes tests (`python nodeworker.py HEAD PORT`):
connects to the head's server by the address the launcher gave it, says so, and stays up
until it is stopped, as a vLLM `--headless` worker stays with its head."""

from __future__ import annotations

import signal
import socket
import sys
import time

DEADLINE_S = 120.0


def main() -> int:
    head, port = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 in its container
    print(f"worker: reaching {head}:{port}", flush=True)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            with socket.create_connection((head, port), timeout=2):
                break
        except OSError as exc:  # the name not yet published, or the head not yet listening
            if time.monotonic() > deadline:
                print(f"worker: cannot reach {head}:{port}: {exc}", flush=True)
                return 1
            time.sleep(0.05)
    print(f"worker: connected to {head}:{port}", flush=True)
    signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
