"""`candidates.known_verdicts`: verdicts known from elsewhere (a nightly CI eval, a colleague's
try, an earlier run), weighed by the posterior search before the first start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import History, sim_command
from llm_bisect.cli import cli
from llm_bisect.config import load_config, read_known_verdicts
from llm_bisect.errors import ConfigError
from llm_bisect.journal import read_events

CHECKS = [{"type": "canary"}, {"type": "expect"}]
QUICK = {"checks": CHECKS, "confirm": False, "localize": {"enabled": False},
         "probe": {"early_stop": False}, "search": {"flake": "auto"}}  # fmt: skip


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_known_verdicts_cut_the_starts_and_the_report_lists_them(tmp_path: Path) -> None:
    """Commit 11 of 0..16 breaks the output. Nightly CI read 9 good and 13 bad; alice read 12
    bad by hand (the file names it by a short sha, relative to the config's folder): the run
    finds the same culprit with fewer server starts than without them, still starting the
    culprit and its parent here; the report lists them as verdicts not run here. `report DIR`
    rebuilds the same answer from the journal, and a resume with another file journals it."""
    h = History(tmp_path, {11: "null-content"}, 16)
    launches = tmp_path / "launches"
    command = [*sim_command(h.repo), "--launch-log", str(launches)]
    plain = h.config(server={"command": command}, **QUICK)
    code, output = invoke("run", str(plain), "--out", str(tmp_path / "plain"))
    assert code == 0, output
    without = launches.read_text().split()
    launches.unlink()
    known = [
        {"commit": h.shas[9], "verdict": "good", "source": "nightly CI eval 2026-08-10"},
        {"commit": h.shas[13], "verdict": "bad", "source": "nightly CI eval 2026-08-11"},
        {"commit": h.shas[12][:10], "verdict": "bad", "source": "alice by hand", "rate": 0.2},
    ]
    (tmp_path / "known.yaml").write_text(yaml.safe_dump(known))
    config = h.config(server={"command": command}, candidates={"known_verdicts": "known.yaml"},
                      **QUICK)  # fmt: skip
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    starts = launches.read_text().split()
    result = json.loads((out / "result.json").read_text())
    plain_result = json.loads((tmp_path / "plain" / "result.json").read_text())
    assert result["culprit"]["commit"] == plain_result["culprit"]["commit"] == h.shas[11]
    assert len(starts) < len(without), (starts, without)
    assert {h.shas[10], h.shas[11]} <= set(starts)
    assert result["search"]["known"] == [
        {"commit": h.shas[9], "verdict": "good", "source": "nightly CI eval 2026-08-10",
         "rate": 0.1},
        {"commit": h.shas[13], "verdict": "bad", "source": "nightly CI eval 2026-08-11",
         "rate": 0.1},
        {"commit": h.shas[12], "verdict": "bad", "source": "alice by hand", "rate": 0.2},
    ]  # fmt: skip
    report = (out / "report.md").read_text()
    assert (f"- verdict not run here: `{h.shas[12][:12]}` bad, from alice by hand (weighed at "
            "a lie rate of 0.2; `candidates.known_verdicts`)") in report  # fmt: skip
    first = read_events(out / "journal.jsonl")[0]
    assert first["event"] == "run" and len(first["search"]["known"]) == 3
    # `report DIR` weighs them as the run did
    (out / "result.json").unlink()
    code, output = invoke("report", str(out))
    assert code == 0, output
    again = json.loads((out / "result.json").read_text())
    assert again["culprit"] == result["culprit"] and again["search"] == result["search"]
    # a resume with another file: journalled, and weighed from there on
    (tmp_path / "known.yaml").write_text(yaml.safe_dump(known[:1]))
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert "candidates.known_verdicts: 1 verdict(s) known from elsewhere weighed" in output
    events = read_events(out / "journal.jsonl")
    assert [e["search"]["known"] for e in events if e["event"] == "search"][-1] == [
        {**known[0], "rate": 0.1}
    ]
    assert len(launches.read_text().split()) == len(starts)  # nothing started again


def _config(tmp_path: Path, **over: Any) -> Path:
    data = {"candidates": {"repo": ".", "good": "a", "bad": "b", "known_verdicts": "k.json"},
            "server": {"command": ["serve"]}, **over}  # fmt: skip
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_known_verdicts_need_the_posterior_search(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^candidates.known_verdicts: .*search.flake"):
        load_config(_config(tmp_path, search={"flake": 0}))
    assert load_config(_config(tmp_path)).candidates.known_verdicts == "k.json"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"commit": "a"}', "expected a list"),
        ('[{"commit": "a", "verdict": "skip", "source": "ci"}]', "entry 0: verdict: "),
        ('[{"commit": "a", "verdict": "bad", "source": "ci", "rate": 0.5}]', "entry 0: rate: "),
        ('[{"commit": "a", "verdict": "bad"}]', "entry 0: source: required key is missing"),
        ('[{"commit": "a", "verdict": "bad", "source": "ci", "by": "x"}]', "entry 0: by: unknown"),
    ],
)
def test_a_known_verdicts_file_that_is_wrong_is_one_line_naming_the_entry(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "k.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_known_verdicts(path)
    assert str(caught.value).startswith(f"candidates.known_verdicts: {path}: ")
    assert said in str(caught.value) and "\n" not in str(caught.value)
