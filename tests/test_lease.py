"""Leases: a run's servers are reaped only once its lease lapsed, never for a PID alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import wait_until
from llm_bisect import lease
from llm_bisect.launchers.common import owner_alive


@pytest.fixture(autouse=True)
def leases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLM_BISECT_LEASES", str(tmp_path / "leases"))
    return tmp_path / "leases"


def test_only_a_lease_that_lapsed_condemns_its_owner() -> None:
    owner = "ci-runner:4194000:12345"  # a pid that is no process here (another namespace)
    assert lease.held(owner) is None and owner_alive(owner)  # cannot tell: spared
    lease.write(owner, time.time() + 60)
    assert lease.held(owner) is True and owner_alive(owner)
    lease.write(owner, time.time() - 1)
    assert lease.held(owner) is False and not owner_alive(owner)


def test_a_process_renews_its_lease_and_a_killed_one_lets_it_lapse(leases: Path) -> None:
    script = (
        "import sys, time; from llm_bisect.launchers.common import owner_label; "
        "print(owner_label(), flush=True); time.sleep(600)"
    )
    env = {**os.environ, "LLM_BISECT_LEASE_S": "1", "LLM_BISECT_LEASES": str(leases)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env,
                            text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        owner = proc.stdout.readline().strip()
        first = lease.expires(owner)
        assert first is not None
        assert wait_until(lambda: (lease.expires(owner) or 0) > first, 30), "renewed"
        assert owner_alive(owner)
    finally:
        proc.kill()
        proc.wait()
    assert wait_until(lambda: lease.held(owner) is False, 30)  # no renewal: it lapses


def test_a_clean_exit_expires_the_lease_at_once(leases: Path) -> None:
    script = "from llm_bisect.launchers.common import owner_label; print(owner_label())"
    env = {**os.environ, "LLM_BISECT_LEASES": str(leases)}
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env=env, check=True).stdout.strip()  # fmt: skip
    assert lease.held(owner) is False


def test_a_stopped_owner_in_this_namespace_is_alive_whatever_its_lease_says() -> None:
    """Ctrl-Z, a paused VM: no renewal, yet the process lives; another llm-bisect on the host
    must not take its servers (review of the lease change)."""
    from llm_bisect.launchers.common import owner_label

    proc = subprocess.Popen(["sleep", "600"])
    try:
        owner = owner_label(proc.pid)
        lease.write(owner, time.time() - 5)  # lapsed, in this PID namespace
        assert owner_alive(owner)
        proc.kill()
        proc.wait()
        assert not owner_alive(owner)  # gone: reaped at once, no wait for the lease
    finally:
        proc.kill()
        proc.wait()


def test_where_no_proc_tells_a_process_life_the_lease_alone_decides(tmp_path: Path) -> None:
    """macOS has no /proc: no start time in the label, no PID namespace in the lease. `reap`
    beside a live `demo --docker` took the run's own label for a dead owner and removed its
    containers (issue 48 item 4): there, a fresh lease keeps the owner alive."""
    from llm_bisect.launchers.common import owner_label, reapable

    no_proc = tmp_path / "no-proc"  # a host without /proc
    own = owner_label(os.getpid(), proc=no_proc)  # this live process, as such a host labels it
    assert own.endswith(":")  # no start time to be read
    lease.write(own, time.time() + 60, space=lease.namespace(no_proc))
    assert owner_alive(own, proc=no_proc)
    assert not reapable(own, mine=False) and owner_alive(own)  # read where /proc is, too
    lease.write(own, time.time() - 1, space=lease.namespace(no_proc))
    assert not owner_alive(own, proc=no_proc)  # its lease lapsed: the owner is gone
    # an owner of this namespace that /proc shows gone is gone at once; without /proc the
    # same lease, still fresh, spares it
    gone = f"{socket.gethostname()}:4194000:12345"  # no such pid here
    lease.write(gone, time.time() + 60)
    assert not owner_alive(gone) and owner_alive(gone, proc=no_proc)
