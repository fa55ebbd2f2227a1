"""Documents an older llm-bisect wrote (tests/corpus/documents-v2: the untyped writers) load
into the typed models, are written back the same, and render the same reports."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from llm_bisect.checks.canary import CanaryDetails
from llm_bisect.checks.eval import EvalDetails
from llm_bisect.checks.expect import ExpectDetails
from llm_bisect.checks.golden import load as golden_load, warnings as golden_warnings
from llm_bisect.checks.logprobs import LogprobsDetails
from llm_bisect.journal import read_journal
from llm_bisect.localize import LocalizationDoc
from llm_bisect.model import CheckDetails, ProbeOutcome, TooLargeDetails, details_of
from llm_bisect.report.documents import CheckDoc, GateDocument, ResultDocument
from llm_bisect.report.gate import render_gate_markdown
from llm_bisect.report.markdown import render_markdown
from llm_bisect.runner import result_of
from llm_bisect.search import Answer
from llm_bisect.services.localization import with_localization

OLD = Path(__file__).parent / "corpus" / "documents-v2"


def _json(name: str) -> Any:
    return json.loads((OLD / name).read_text())


def test_an_older_result_loads_typed_and_is_written_back_the_same() -> None:
    doc = ResultDocument.model_validate(_json("result.json"))
    bad = doc.probe_of(doc.range[-1])
    assert bad is not None
    kinds = {c.name: type(c.details) for c in bad.checks}
    assert kinds == {
        "canary": CanaryDetails,
        "expect": ExpectDetails,
        "logprobs": LogprobsDetails,
        "eval": EvalDetails,
    }
    logprobs = next(c.details for c in bad.checks if isinstance(c.details, LogprobsDetails))
    assert logprobs.metrics.not_close == 4 and logprobs.thresholds["not_close"].source == "default"
    assert logprobs.cases[0].divergence is not None
    assert bad.fingerprint.kernels["moe_backend"] == "TRITON"
    assert bad.fingerprint.server is not None and bad.fingerprint.server.version
    assert doc.localization is not None and doc.localization.module == "model.layers.2.mlp"
    assert doc.fingerprints is not None and doc.fingerprints.new.commit == doc.range[-1]
    assert doc.eval_power is not None and doc.eval_power.n == 16
    assert doc.model_dump(mode="json") == _json("result.json")


def test_an_older_report_renders_the_same_from_its_result() -> None:
    """As the untyped code wrote it, but for what report.md gained since, made of what the
    older result holds: the first screen's lies assumed and its facts (images, dependencies,
    backends, the first divergence, the checks), the block for an issue."""
    doc = ResultDocument.model_validate(_json("result.json"))
    md = render_markdown(doc)
    gained = re.compile(
        r"^> lies assumed[^\n]*\n|^- images: .*?\n\n(?=\*\*Status)"
        r"|^### Away from this machine\n.*?(?=^## )",
        re.M | re.S,
    )
    assert len(gained.findall(md)) == 3
    # reworded since: the eval's power, with the chance flips it assumed
    reworded = re.compile(r"^⚠ The eval.*\n", re.M)
    old = (OLD / "report.md").read_text()
    assert "power 0.8; flips: 0 assumed)" in md and len(reworded.findall(old)) == 1
    assert reworded.sub("", gained.sub("", md)) == reworded.sub("", old)


def test_an_older_journal_gives_the_result_it_gave(tmp_path: Path) -> None:
    reading = read_journal(OLD / "journal.jsonl")
    assert reading.state is not None
    warnings = golden_warnings(golden_load(OLD / "golden.json"))
    step, result = result_of(reading.state, warnings)
    assert isinstance(step, Answer) and result is not None
    shutil.copy(OLD / "localization.json", tmp_path / "localization.json")
    result = with_localization(result, tmp_path)
    assert result.model_dump(mode="json") == _json("result.json")


def test_an_older_golden_keeps_its_fingerprint() -> None:
    golden = golden_load(OLD / "golden.json")
    assert golden.fingerprint.known and golden.fingerprint.kernels["attention_backend"]
    assert golden.model_dump(mode="json") == _json("golden.json")


def test_an_older_localization_loads_and_is_written_back_the_same() -> None:
    doc = LocalizationDoc.model_validate(_json("localization.json"))
    assert doc.call is not None and doc.call.module == "model.layers.2.mlp"
    assert doc.ranks[0].curve[0][0] == "model.embed_tokens"
    assert doc.model_dump(mode="json") == _json("localization.json")


def test_a_failed_localization_keeps_its_four_keys() -> None:
    failed = {"good": "a" * 40, "bad": "b" * 40, "error": "no GPU", "line": "not localised"}
    doc = LocalizationDoc.model_validate(failed)
    assert doc.error == "no GPU" and doc.module is None
    assert doc.model_dump(mode="json") == failed


def test_an_older_gate_loads_and_renders_the_same() -> None:
    doc = GateDocument.model_validate(_json("gate.json"))
    assert isinstance(doc.probe.checks[0].details, CanaryDetails)
    assert doc.fingerprints is not None and doc.fingerprints.old.verdict is None
    assert doc.model_dump(mode="json") == _json("gate.json")
    md = render_gate_markdown(doc)
    # what the gate report gained since, made of what the older gate holds, as the run's:
    # the backends on the first screen, the block for an issue
    gained = re.compile(r"^- backends \([^\n]*\n\n|^### Away from this machine\n.*?(?=^## )",
                        re.M | re.S)  # fmt: skip
    assert len(gained.findall(md)) == 2
    assert gained.sub("", md) == (OLD / "gate-report.md").read_text()


def test_an_older_probe_without_a_golden_loads_and_is_written_back_the_same() -> None:
    outcome = ProbeOutcome.from_json(_json("probe.json"))
    canary = outcome.checks[0].details
    assert isinstance(canary, CanaryDetails) and canary.judged_against == "absolute rules"
    assert canary.cases[0].golden is None and canary.cases[0].problems
    assert outcome.to_json() == _json("probe.json")


def test_a_reply_over_the_cap_and_a_check_of_its_own_keep_their_details() -> None:
    cap = {"reply_too_large": {"cap_bytes": 1024}}
    assert isinstance(details_of("canary", cap), TooLargeDetails)
    toy = CheckDoc(name="toy", passed=True, score=1.0, details={"seen": [1, 2]})
    assert type(toy.details) is CheckDetails
    assert toy.model_dump(mode="json")["details"] == {"seen": [1, 2]}
