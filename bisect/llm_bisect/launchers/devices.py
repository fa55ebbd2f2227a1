"""Which GPUs each slot uses: its own, never another slot's on the same host. Pure.

    parallel: 2 on one 8-GPU host        slot 0: 0,1,2,3        slot 1: 4,5,6,7
    (a process: CUDA_VISIBLE_DEVICES and `{gpus}`; a container: its device ids)

Slot s runs on host s mod h (h hosts: `docker_hosts`; one for the process launcher) and is
the (s div h)-th slot there. The devices come from `server.slot_gpus` (one list per slot),
else the host's GPUs are split in equal parts, one a slot there: a container's
`server.gpus` ids, a process's CUDA_VISIBLE_DEVICES (the config's, else the caller's), else
what nvidia-smi lists. Where they do not split, or cannot be listed (`gpus: all` on an
engine), `parallel` is refused before anything starts: k servers on the same GPUs run out
of memory, or worse, slow each other into timeouts that look like regressions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import ConfigError

Devices = tuple[str, ...]

EXAMPLE = "e.g. server.slot_gpus: [[0,1,2,3],[4,5,6,7]]"


def slot_devices(
    parallel: int,
    slot_gpus: Sequence[Sequence[str]] | None,
    pool: Sequence[str] | None,
    *,
    hosts: int = 1,
    where: str = "the host's GPUs",
) -> list[Devices | None]:
    """Per slot 0..parallel-1, the devices it alone uses; None where a slot has its host to
    itself, or the host has no GPU to share (`pool` None or empty: it is left as it is).
    `where` names the pool in messages. ConfigError when the GPUs cannot be split."""
    if slot_gpus:
        if len(slot_gpus) < parallel:
            raise ConfigError(
                f"server.slot_gpus: parallel: {parallel} needs a device list per slot, "
                f"got {len(slot_gpus)}"
            )
        return [tuple(slot_gpus[s]) for s in range(parallel)]
    per_host = math.ceil(parallel / max(1, hosts))
    if per_host <= 1 or not pool:
        return [None] * parallel
    if len(pool) % per_host:
        raise ConfigError(
            f"parallel: {parallel} puts {per_host} slots on one host, and {where} "
            f"({', '.join(pool)}) do not split into {per_host} equal parts: give each slot "
            f"its own in server.slot_gpus ({EXAMPLE})"
        )
    size = len(pool) // per_host
    return [tuple(pool[(s // hosts) * size : (s // hosts + 1) * size]) for s in range(parallel)]


def cuda_visible(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list; None when unset."""
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]
