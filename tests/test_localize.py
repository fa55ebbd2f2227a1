"""Where in the model: the comparison (pure), and runs on the simulator's worker extension."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import History, live_processes
from llm_bisect.app import WORKER_DIR, localize_instrument
from llm_bisect.cli import cli
from llm_bisect.launchers.docker import INSTRUMENT_DIR, instrument_spec
from llm_bisect.localize import compare_rank, events_of, localize, relative_difference
from llm_bisect.sim import model


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_relative_difference() -> None:
    assert relative_difference([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert relative_difference([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)
    assert relative_difference([1.0, 2.0], [-1.0, -2.0]) == pytest.approx(2.0)
    assert relative_difference([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert relative_difference([1.0], [1.0, 2.0]) == 1.0
    assert 0.0 < relative_difference([1.0, 2.0], [1.0, 2.1]) < 0.01


def event(module: str, kind: str, values: list[float]) -> dict[str, Any]:
    return {"module": module, "kind": kind, "shape": [1, 4],
            "rows": [{"sample": values, "hash": ",".join(map(str, values))}]}  # fmt: skip


def network(changed: dict[tuple[str, str], list[float]] | None = None) -> list[dict[str, Any]]:
    """A layer whose MLP calls up_proj then down_proj, as hooks see it (pre, children, post)."""
    base = [1.0, 2.0, 3.0, 4.0]
    order = [
        ("model.layers.0", "input"),
        ("model.layers.0.attn", "input"),
        ("model.layers.0.attn", "output"),
        ("model.layers.0.mlp", "input"),
        ("model.layers.0.mlp.up_proj", "input"),
        ("model.layers.0.mlp.up_proj", "output"),
        ("model.layers.0.mlp.down_proj", "input"),
        ("model.layers.0.mlp.down_proj", "output"),
        ("model.layers.0.mlp", "output"),
        ("model.layers.0", "output"),
    ]
    changed = changed or {}
    return [event(m, k, changed.get((m, k), base)) for m, k in order]


def test_an_output_that_differs_after_matching_inputs_is_the_module_itself() -> None:
    wrong = [4.0, 3.0, 2.0, 1.0]
    bad = network({("model.layers.0.mlp.up_proj", "output"): wrong,
                   ("model.layers.0.mlp.down_proj", "input"): wrong})  # fmt: skip
    found = compare_rank(0, events_of({"events": network()}), events_of({"events": bad}))
    assert found.module == "model.layers.0.mlp.up_proj"
    assert found.event == "model.layers.0.mlp.up_proj (output)"
    assert found.before_max == 0.0 and found.difference > 0.1
    assert "input matched" in found.why


def test_an_input_that_differs_points_at_the_code_that_calls_it() -> None:
    bad = network({("model.layers.0.mlp.down_proj", "input"): [4.0, 3.0, 2.0, 1.0]})
    found = compare_rank(0, events_of({"events": network()}), events_of({"events": bad}))
    assert found.module == "model.layers.0.mlp", found
    # a call the bad build no longer makes: also its caller's code
    skipped = [e for e in network() if e["module"] != "model.layers.0.mlp.up_proj"]
    found = compare_rank(0, events_of({"events": network()}), events_of({"events": skipped}))
    assert found.module == "model.layers.0.mlp" and "not called" in found.why


def test_the_good_builds_own_noise_raises_the_tolerance() -> None:
    noisy = [1.0, 2.0, 3.35, 4.0]
    again = network({("model.layers.0.attn", "output"): noisy})
    bad = network({("model.layers.0.attn", "output"): [1.0, 2.0, 3.6, 4.0]})
    good = events_of({"events": network()})
    found = compare_rank(0, good, events_of({"events": bad}), events_of({"events": again}))
    assert found.index is None, "within four times what the good build differs from itself"
    assert compare_rank(0, good, events_of({"events": bad})).index is not None, "no noise: flagged"


def test_ranks_are_compared_rank_by_rank_and_the_earliest_is_named() -> None:
    good = [{"rank": 0, "events": network()}, {"rank": 1, "events": network()}]
    late = network({("model.layers.0", "output"): [9.0, 9.0, 9.0, 9.0]})
    early = network({("model.layers.0.attn", "output"): [0.0, 1.0, 0.0, 1.0]})
    found = localize(good, [{"rank": 0, "events": late}, {"rank": 1, "events": early}])
    assert found.first is not None and found.first.rank == 1
    assert found.line().startswith("first divergence: model.layers.0.attn on rank 1")
    same = localize(good, good)
    assert same.first is None and same.line().startswith("no divergence")


def test_the_simulated_network_localises_each_model_fault() -> None:
    ids = [5, 6, 7]
    for fault, where in model.ENTERS.items():
        found = localize(
            [{"rank": 0, "events": model.module_events(ids, "none")}],
            [{"rank": 0, "events": model.module_events(ids, fault)}],
        )
        assert found.first is not None and found.first.module == where, fault
    outside = localize(
        [{"rank": 0, "events": model.module_events(ids, "none")}],
        [{"rank": 0, "events": model.module_events(ids, "reasoning-parser")}],
    )
    assert outside.first is None


def test_a_run_that_finds_its_culprit_says_where_in_the_model(tmp_path: Path, history: Any) -> None:
    h: History = history({6: "numerics"}, n=10)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config()), "--out", str(out))
    assert code == 0, output
    assert "first divergence: model.layers.2.mlp" in output
    result = json.loads((out / "result.json").read_text())
    found = result["localization"]
    assert found["module"] == "model.layers.2.mlp" and found["good"] == h.shas[5]
    assert found["bad"] == h.shas[6] and found["tokens"] > 0 and found["collected_bytes"] > 0
    report = (out / "report.md").read_text()
    assert "## Where in the model" in report and "first divergence: model.layers.2.mlp" in report
    # the extension is in the two localisation probes only, never in a normal probe
    for probe in result["probes"]:
        log = (out / "probes" / probe["commit"][:12] / "server.log").read_text()
        assert "worker_extension_cls" not in log
    for commit in (h.shas[5], h.shas[6]):
        log = (out / "localize" / commit[:12] / "server.log").read_text()
        assert "worker_extension_cls='llm_bisect_worker.Extension'" in log
    # `report DIR` keeps it; a resumed run does not localise again
    (out / "report.md").unlink()
    code, output = invoke("report", str(out))
    assert code == 0 and "## Where in the model" in (out / "report.md").read_text()
    before = (out / "localization.json").stat().st_mtime_ns
    code, output = invoke("run", str(h.config()), "--out", str(out))
    assert code == 0 and (out / "localization.json").stat().st_mtime_ns == before
    assert live_processes(str(h.repo)) == []


def test_localize_false_and_an_engine_without_the_extension(tmp_path: Path, history: Any) -> None:
    h: History = history({4: "degenerate-content"}, n=6)
    out = tmp_path / "off"
    code, output = invoke("run", str(h.config(localize=False)), "--out", str(out))
    assert code == 0, output
    assert json.loads((out / "result.json").read_text())["localization"] is None
    assert not (out / "localize").exists()
    # an OpenAI-compatible server that is not vLLM: said, and the run still found its culprit
    other: History = History(tmp_path / "other", {4: "degenerate-content"}, 6,
                             settings={"rpc": False})  # fmt: skip
    out = tmp_path / "other-out"
    code, output = invoke("run", str(other.config()), "--out", str(out))
    assert code == 0, output
    found = json.loads((out / "result.json").read_text())["localization"]
    assert "no /collective_rpc" in found["error"], found
    assert "not localised: " in (out / "report.md").read_text()


def test_the_localize_command(tmp_path: Path, history: Any) -> None:
    h: History = history({3: "garbled-math"}, n=5)
    out = tmp_path / "loc"
    code, output = invoke(
        "localize", str(h.config()), "--good", h.shas[2], "--bad", h.shas[3], "--out", str(out)
    )
    assert code == 0, output
    assert "first divergence: model.layers.0.mlp" in output
    assert json.loads((out / "localization.json").read_text())["module"] == "model.layers.0.mlp"
    code, output = invoke("localize", str(h.config()), "--good", h.shas[1], "--bad", h.shas[2])
    assert code == 0 and "no divergence" in output, output
    code, output = invoke("localize", str(h.config()), "--good", "nope", "--bad", h.shas[2])
    assert code == 2 and len(output.strip().splitlines()) == 1, output


def test_the_same_build_twice_is_one_line_and_starts_nothing(tmp_path: Path, history: Any) -> None:
    """`--good X --bad X` used to run two probes of one build and exit 0."""
    h: History = history({3: "garbled-math"}, n=5)
    launches = tmp_path / "launches"
    config = h.config(server={"command": [*h.config_command(), "--launch-log", str(launches)]})
    for bad in (h.shas[2], h.shas[2][:10]):
        code, output = invoke("localize", str(config), "--good", h.shas[2], "--bad", bad)
        assert code == 2, output
        assert output.strip().splitlines() == [
            f"llm-bisect: error: --bad: {bad!r} is the same build as --good ({h.shas[2][:12]}); "
            "localize compares two builds"
        ]
    assert not launches.exists()


def test_a_container_gets_the_extension_mounted_first_on_its_pythonpath() -> None:
    spec: dict[str, Any] = {
        "command": ["--port", "8000"],
        "environment": {"PYTHONPATH": "/src", "A": "1"},
        "volumes": ["/models:/models:ro"],
    }
    instrument_spec(spec, localize_instrument(), None)
    assert spec["command"] == [
        "--port", "8000", "--enforce-eager", "--no-enable-prefix-caching",
        "--worker-extension-cls", "llm_bisect_worker.Extension",
    ]  # fmt: skip
    assert spec["volumes"] == ["/models:/models:ro", f"{WORKER_DIR}:{INSTRUMENT_DIR}/0:ro"]
    assert spec["environment"] == {
        "PYTHONPATH": f"{INSTRUMENT_DIR}/0:/src",
        "A": "1",
        "VLLM_SERVER_DEV_MODE": "1",
    }
    assert (WORKER_DIR / "llm_bisect_worker.py").is_file()


def test_saved_tensors_with_docker_are_a_one_line_error(tmp_path: Path, history: Any) -> None:
    h: History = history({2: "numerics"}, n=3)
    config = h.config(
        server={"launcher": "docker", "image": "x:{commit}", "command": None},
        localize={"save_tensors": True},
    )
    data = yaml.safe_load(config.read_text())
    data["server"].pop("command")
    config.write_text(yaml.safe_dump(data))
    code, output = invoke("candidates", str(config))
    assert code == 2, output
    assert output.strip().splitlines() == [
        "llm-bisect: error: localize.save_tensors: the process launcher's only"
    ]  # no stray colon where a rule spans the whole config
