"""Each slot's own GPUs: split from the host's, given per slot, or refused before anything
starts (launchers/devices.py, and how the config's launcher picks the pool)."""

from __future__ import annotations

from typing import Any

import pytest

from llm_bisect.config import parse_config
from llm_bisect.errors import ConfigError
from llm_bisect.launchers.devices import slot_devices
from llm_bisect.services.setup import slot_devices_of

EIGHT = [str(i) for i in range(8)]


def config(server: dict[str, Any], parallel: int) -> Any:
    return parse_config(
        {
            "candidates": {"repo": ".", "good": "a", "bad": "b"},
            "server": server,
            "parallel": parallel,
        }
    )


PROCESS = {"command": ["vllm", "serve", "--port", "{port}"]}
DOCKER = {"launcher": "docker", "image": "vllm/vllm-openai:nightly-{commit}"}


def test_the_hosts_gpus_split_in_equal_parts_one_a_slot() -> None:
    assert slot_devices(2, None, EIGHT) == [("0", "1", "2", "3"), ("4", "5", "6", "7")]
    assert slot_devices(4, None, EIGHT)[3] == ("6", "7")
    # two hosts, four slots: slots 0 and 2 on the first host, 1 and 3 on the second
    assert slot_devices(4, None, EIGHT, hosts=2) == [
        ("0", "1", "2", "3"),
        ("0", "1", "2", "3"),
        ("4", "5", "6", "7"),
        ("4", "5", "6", "7"),
    ]
    assert slot_devices(1, None, EIGHT) == [None]  # one slot: the host is its own
    assert slot_devices(3, None, None) == [None] * 3  # no GPU to share (a CPU node)
    with pytest.raises(ConfigError, match=r"do not split into 3 equal parts"):
        slot_devices(3, None, EIGHT)


def test_slot_gpus_are_taken_as_given_and_must_cover_every_slot() -> None:
    assert slot_devices(2, [["0", "1"], ["6", "7"]], EIGHT) == [("0", "1"), ("6", "7")]
    with pytest.raises(ConfigError, match=r"server.slot_gpus: parallel: 3 needs a device list"):
        slot_devices(3, [["0"], ["1"]], EIGHT)


def test_a_process_splits_its_visible_devices_else_the_node_gpus() -> None:
    asked: list[bool] = []

    def gpus() -> list[str]:
        asked.append(True)
        return EIGHT

    two = config(PROCESS, 2)
    assert slot_devices_of(two, {}, {}, gpus)[1] == ("4", "5", "6", "7")
    assert slot_devices_of(two, {}, {"CUDA_VISIBLE_DEVICES": "2,3"}, gpus) == [("2",), ("3",)]
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert slot_devices_of(two, env, {"CUDA_VISIBLE_DEVICES": "0"}, gpus)[0] == ("4", "5")
    assert asked == [True]  # nvidia-smi only when nothing else says
    assert slot_devices_of(config(PROCESS, 1), {}, {}, gpus) == [None]
    with pytest.raises(ConfigError) as err:
        slot_devices_of(config(PROCESS, 3), {}, {}, gpus)
    assert str(err.value).startswith("parallel: 3 puts 3 slots on one host, and the GPUs")
    assert "server.slot_gpus" in str(err.value)


def test_containers_on_one_engine_never_share_gpus() -> None:
    listed = {**DOCKER, "gpus": EIGHT}
    assert slot_devices_of(config(listed, 2), {}, {})[0] == ("0", "1", "2", "3")
    for gpus in ("all", 4):
        with pytest.raises(ConfigError, match=rf"server.gpus: {gpus} gives each of them the same"):
            slot_devices_of(config({**DOCKER, "gpus": gpus}, 2), {}, {})
    # a slot an engine: nothing is shared
    hosts = {**DOCKER, "gpus": "all", "docker_hosts": ["ssh://a", "ssh://b"]}
    assert slot_devices_of(config(hosts, 2), {}, {}) == [None, None]
    given = {**DOCKER, "gpus": "all", "slot_gpus": [[0, 1], [2, 3]]}
    assert slot_devices_of(config(given, 2), {}, {}) == [("0", "1"), ("2", "3")]


def test_slurm_gives_each_probe_its_own_allocation() -> None:
    slurm = {"launcher": "slurm", "command": ["vllm", "serve"]}
    assert slot_devices_of(config(slurm, 4), {}, {}) == []
