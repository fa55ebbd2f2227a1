"""`launcher: toyproc`: each candidate's server is a command run here, as a process."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from llm_bisect.config import ServerBase
from llm_bisect.errors import NotReady, ServerExited
from llm_bisect.kinds import LAUNCHERS, LauncherContext, LauncherKind
from llm_bisect.launchers import Artifact, Instrument
from llm_bisect.model import Candidate


class ToyProcConfig(ServerBase):
    """`server:` of `launcher: toyproc`."""

    launcher: Literal["toyproc"]
    command: list[str]
    """The server's argv; `{port}` and `{commit}` are filled in. Never run through a shell."""


class ToyProcServer:
    """One candidate's server: started on entering, stopped on leaving, whatever happened."""

    def __init__(self, argv: list[str], port: int, log: Path, ready_timeout: float) -> None:
        self.argv = argv
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = log
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.out: IO[bytes] | None = None

    def __enter__(self) -> ToyProcServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.out = self.log.open("wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.out, stderr=subprocess.STDOUT)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5):
                    return
            except OSError:
                time.sleep(0.1)  # polling the port until the deadline, not a guess
        raise NotReady(f"not ready within {self.ready_timeout:g}s", self.log_tail())

    def check_alive(self, wait: float = 0.0) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(wait) if wait else self.proc.poll()
        except subprocess.TimeoutExpired:
            return
        if code is not None:
            raise ServerExited(f"the server exited with {code}", code, self.log_tail())

    def log_tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def fingerprint(self) -> dict[str, Any]:
        return {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        if self.out is not None:
            self.out.close()


class ToyProcLauncher:
    """Makes a ToyProcServer per candidate."""

    def __init__(self, cfg: ToyProcConfig, ctx: LauncherContext) -> None:
        self.cfg = cfg

    def artifact(self, candidate: Candidate) -> Artifact:
        return Artifact(ref=" ".join(self.cfg.command), available=True, local=True)

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> ToyProcServer:
        with socket.socket() as s:  # a free port: the server binds it next
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        values = {"port": str(port), "commit": candidate.commit}
        argv = [arg.format_map(values) for arg in self.cfg.command]
        return ToyProcServer(argv, port, probe_dir / "server.log", self.cfg.ready_timeout)

    def prefetch(self, candidates: list[Candidate]) -> None:
        return None

    def quiet(self) -> AbstractContextManager[None]:
        return nullcontext()

    def reap(self) -> list[str]:
        return []  # its servers end with the run (stop), nothing is left to remove

    def close(self) -> None:
        return None


KIND = LAUNCHERS.register(
    LauncherKind(
        "toyproc",
        ToyProcConfig,
        make=ToyProcLauncher,
        shape=frozenset({"command"}),
        argv=("command",),
    )
)
