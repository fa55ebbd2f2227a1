"""result.json and report.md rendered from values, no server."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import (
    CACHE_VARIABLES,
    HOSTILE_LINE,
    HOSTILE_LOG,
    HOSTILE_TAGS,
    History,
    as_in_an_issue,
    cli_on_path,
    first_screen,
    github_render,
    printed_commands,
    served_as_printed,
    shell_words,
)
from llm_bisect.checks.metrics import degeneration
from llm_bisect.cli import cli
from llm_bisect.enginecache import CACHES
from llm_bisect.fingerprint import Fingerprint, parse_startup_log
from llm_bisect.journal import Span
from llm_bisect.launchers.docker import run_line
from llm_bisect.model import Candidate, CheckResult, ProbeOutcome, Verdict
from llm_bisect.report.documents import ResultDocument
from llm_bisect.report.html import render_html
from llm_bisect.report.links import commit_url, compare_url, pr_number, pr_url, web_url
from llm_bisect.report.markdown import render_markdown as render_doc
from llm_bisect.report.result import Ran, build_result
from llm_bisect.search import Answer, Mode, Plan, Status, plan_step
from test_cli import invoke
from test_collectenv import stand_in_smi

SEQ = tuple(
    Candidate(f"{i:040x}", subject=f"commit {i} | piped", author="A <a@x>") for i in range(5)
)


def render_markdown(result: ResultDocument | dict[str, Any]) -> str:
    """report.md of a result.json document, read as the typed document it must be."""
    return render_doc(ResultDocument.model_validate(result))


def outcome(i: int, verdict: Verdict, evidence: str = "fine") -> ProbeOutcome:
    passed = verdict is Verdict.GOOD
    check = CheckResult("canary", passed, 1.0 if passed else 0.0, evidence)
    return ProbeOutcome(SEQ[i].commit, verdict, "reason", (check,), {"total": 1.25})


def test_found_report_has_culprit_evidence_and_table() -> None:
    plan = Plan(Mode.REGRESSION, SEQ)
    answer = Answer(
        Status.FOUND, SEQ[3], (SEQ[2].commit, SEQ[3].commit), "first bad candidate found"
    )
    probes = [
        outcome(0, Verdict.GOOD),
        outcome(4, Verdict.BAD, "now now now"),
        outcome(2, Verdict.GOOD, "I am well"),
        outcome(3, Verdict.BAD, "now now now"),
    ]
    result = build_result(plan, answer, probes).model_dump(mode="json")
    assert result["status"] == "found"
    assert result["culprit"] == {**SEQ[3].to_json(), "artifact": ""}
    assert result["good"] == SEQ[0].commit and result["bad"] == SEQ[4].commit
    assert [p["verdict"] for p in result["probes"]] == ["good", "bad", "good", "bad"]
    md = render_markdown(result)
    assert f"`{SEQ[3].commit}` commit 3 \\| piped" in md  # `|` shows as itself
    assert f"- **first bad** `{SEQ[3].short}`: now now now" in md
    assert f"- **last good** `{SEQ[2].short}`: I am well" in md
    assert "| 4 | `" in md and "commit 3 \\| piped" in md and "| 1.2 |" in md


def test_ambiguous_lists_every_possible_first_bad() -> None:
    plan = Plan(Mode.REGRESSION, SEQ)
    rng = tuple(c.commit for c in SEQ[1:4])
    md = render_markdown(
        build_result(plan, Answer(Status.AMBIGUOUS, None, rng, "2 untestable"), [])
    )
    assert "## Could be any of" in md
    assert f"- `{SEQ[2].commit}`" in md and f"- `{SEQ[3].commit}`" in md
    assert "## Culprit" not in md


def test_merge_base_bad_names_the_fix_range() -> None:
    anchor = Candidate("f" * 40, subject="nightly")
    plan = Plan(Mode.REGRESSION, SEQ, anchor=anchor)
    answer = Answer(
        Status.NO_REGRESSION, None, (), "predates", fix_range=(SEQ[0].commit, anchor.commit)
    )
    result = build_result(plan, answer, []).model_dump(mode="json")
    assert result["merge_base"] == SEQ[0].commit
    assert result["fix_range"] == [SEQ[0].commit, anchor.commit]
    assert "--find-fix" in render_markdown(result)


def test_the_report_says_how_small_a_drop_the_eval_could_see() -> None:
    from llm_bisect.checks.stats import TEST, PairedTest

    test = PairedTest()
    # 92% right on 64 problems, 3 of them flipping each way by chance: 92% → 87% passes unseen
    assert round(test.detectable_drop(64, 59, 6 / 64), 3) == 0.153
    assert round(test.detectable_drop(1319, 1213, 6 / 64), 3) == 0.023
    plan = Plan(Mode.REGRESSION, SEQ)
    answer = Answer(Status.NO_REGRESSION, None, (), "no change")
    for n, warned in ((64, True), (1319, False)):
        right = round(0.92 * n)
        power = {"n": n, "golden_accuracy": right / n, "alpha": 0.05, "power": 0.8}
        power |= {"test": TEST, "flips": 6 / 64, "tolerance": 0.0}
        power["detectable_drop"] = test.detectable_drop(n, right, 6 / 64)
        check = CheckResult("eval", True, 0.92, "fine", {"power": power})
        probe = ProbeOutcome(SEQ[0].commit, Verdict.GOOD, "ok", (check,), {"total": 1.0})
        result = build_result(plan, answer, [probe]).model_dump(mode="json")
        assert result["eval_power"] == power
        md = render_markdown(result)
        assert f"The eval detects, on its {n:,} answers compared, an accuracy drop of" in md
        assert f"({TEST}, alpha 0.05, power 0.8; flips: 9.4% of answers change by chance)" in md
        assert ("⚠" in md and "passes unseen" in md) is warned
    # computed with no chance flips, where nothing measured them: it says it assumed so, and
    # names the problems the eval asked
    power |= {"flips": 0.0, "flips_from": "assumed", "data": "test.jsonl, 1,319 problems"}
    power["detectable_drop"] = test.detectable_drop(n, right, 0.0)
    check = CheckResult("eval", True, 0.92, "fine", {"power": power})
    probe = ProbeOutcome(SEQ[0].commit, Verdict.GOOD, "ok", (check,), {"total": 1.0})
    md = render_markdown(build_result(plan, answer, [probe]).model_dump(mode="json"))
    assert (
        "The eval (test.jsonl, 1,319 problems) detects, on its 1,319 answers compared, an "
        "accuracy drop of 0.5% or more" in md
    ), md
    assert "power 0.8; flips: 0 assumed: nothing measured how many answers change by chance" in md


GOLDEN_MD = Path(__file__).parent / "golden" / "report.md"
SUBJECTS = [f"[Kernel] change {i} (#2400{i})" for i in range(5)]
SHAS = tuple(
    Candidate(
        hashlib.sha1(f"commit {i}".encode()).hexdigest(),
        subject=SUBJECTS[i],
        author="A <a@x>",
        date="2026-08-12",
    )
    for i in range(5)
)
DIGEST = "vllm/vllm-openai@sha256:" + "ab" * 32


def _logprobs(divergent: bool) -> CheckResult:
    side = {"token": "15505", "text": " well", "logprob": -0.07, "top": []}
    now = {"token": "11038", "text": " we", "logprob": -0.23, "top": []}
    case = {
        "prompt": "hello how are you",
        "first_divergence": 2 if divergent else None,
        "teacher_mean_abs_delta": 0.41 if divergent else 0.0,
        "teacher_deltas": [0.0, 0.1, 0.9],
        "divergence": {"position": 2, "golden": side, "candidate": now} if divergent else None,
    }
    evidence = "1 of 1 prompts not close" if divergent else "1 prompts match the golden"
    return CheckResult("logprobs", not divergent, 0.5, evidence, {"cases": [case]})


def _probe(i: int, verdict: Verdict, at: float) -> ProbeOutcome:
    bad = verdict is Verdict.BAD
    fingerprint = {
        "image": {"ref": f"vllm/vllm-openai:nightly-{SHAS[i].commit}", "digest": DIGEST},
        "kernels": {"attention_backend": "FLASHINFER" if bad else "FLASH_ATTN"},
        "command": "docker run --rm --gpus all -e HF_TOKEN -e NCCL_MNNVL_ENABLE=1 "
        f"-e VLLM_USE_V2_MODEL_RUNNER=1 vllm/vllm-openai:{SHAS[i].short}",
    }
    checks = (CheckResult("canary", not bad, 1.0 - bad, "now now now" if bad else "I am well"),)
    return ProbeOutcome(
        SHAS[i].commit,
        verdict,
        "failed: canary" if bad else "2 check(s) passed",
        (*checks, _logprobs(bad)),
        {"artifact": 0.5, "launch": 60.0 + at, "ready": 300.0, "checks": 40.0, "total": 345.0},
        "",
        fingerprint,
    )


def golden_result() -> ResultDocument:
    """A fixed found result: refs, links, reproduce, environment and divergence all present."""
    plan = Plan(Mode.REGRESSION, SHAS)
    answer = Answer(Status.FOUND, SHAS[3], (SHAS[2].commit, SHAS[3].commit), "first bad found")
    verdicts = [(0, Verdict.GOOD), (4, Verdict.BAD), (2, Verdict.GOOD), (3, Verdict.BAD)]
    probes = [_probe(i, v, k) for k, (i, v) in enumerate(verdicts)]
    spans = [Span(1000.0 + 400 * k, 1345.0 + 400 * k) for k in range(len(probes))]
    context = {
        "good_ref": "nightly-2026-08-09",
        "bad_ref": "v0.27.0",
        "config": "/srv/llm-bisect/configs/kimi.yaml",
        "golden": "/srv/llm-bisect/runs/kimi/golden.json",
        "repo_url": "https://github.com/vllm-project/vllm",
        "environment": {
            "os": "Linux-6.8",
            "python": "3.12.3",
            "llm_bisect": "0.1.0",
            "gpus": [{"name": "NVIDIA B300", "memory.total": "275040 MiB"}] * 8,
            "gpu_count": 8,
            "driver": "580.65.06",
            "cuda": "13.0",
        },
    }
    return build_result(
        plan, answer, probes, Ran(spans=spans, context=context, started=990.0, ended=2600.0)
    )


def test_report_md_matches_its_golden_file() -> None:
    """The summary, links, reproduce block, environment and divergence table, as pasted into
    a GitHub issue (LLM_BISECT_REGENERATE=1 rewrites the golden file after a deliberate change)."""
    md = render_markdown(golden_result())
    if os.environ.get("LLM_BISECT_REGENERATE"):
        GOLDEN_MD.parent.mkdir(exist_ok=True)
        GOLDEN_MD.write_text(md)
    assert md == GOLDEN_MD.read_text()
    head = md.splitlines()[:6]
    shown = github_render(md, "https://github.com/vllm-project/vllm")
    assert shown.problems == []
    assert shown.headings[0] == f"llm-bisect: {SHAS[3].short} {SUBJECTS[3]}"  # as it reads
    url = "https://github.com/vllm-project/vllm"
    assert f"[`{SHAS[3].short}`]({url}/commit/{SHAS[3].commit})" in head[2]
    assert f"([#24003]({url}/pull/24003))" in head[2]
    assert "good `nightly-2026-08-09` (`" in head[3] and "bad `v0.27.0` (`" in head[3]
    assert f"{url}/compare/{SHAS[2].commit}...{SHAS[3].commit}" in head[3]
    assert "4 probes over 5 candidates · 26m 50s (23m 00s in probes)" in head[4]
    assert (
        f"llm-bisect check /srv/llm-bisect/configs/kimi.yaml --candidate {SHAS[3].commit} "
        "--golden /srv/llm-bisect/runs/kimi/golden.json   # expect bad: exit 1"
    ) in md
    assert "-e HF_TOKEN -e NCCL_MNNVL_ENABLE=1 -e VLLM_USE_V2_MODEL_RUNNER=1" in md
    assert f"| image.digest | `{DIGEST}` | `{DIGEST}` |" in md  # whole, never cut
    assert "- GPUs: 8 x NVIDIA B300 (275040 MiB)" in md and "driver 580.65.06, CUDA 13.0" in md
    assert "| 'hello how are you' | 2 | `15505` ' well'" in md


def test_links_from_remotes() -> None:
    for remote in (
        "git@github.com:vllm-project/vllm.git",
        "https://github.com/vllm-project/vllm.git",
        "ssh://git@github.com/vllm-project/vllm",
        "https://user:token@github.com/vllm-project/vllm/",
    ):
        assert web_url(remote) == "https://github.com/vllm-project/vllm", remote
    assert web_url("/srv/mirrors/vllm") == "" and web_url("git@example.com:a/b.git") == ""
    lab = web_url("git@gitlab.com:group/sub/engine.git")
    assert commit_url(lab, "a" * 40) == f"https://gitlab.com/group/sub/engine/-/commit/{'a' * 40}"
    assert pr_url(lab, 7).endswith("/-/merge_requests/7")
    assert pr_number("[Bugfix] x (#123) (#24040)") == 24040 and pr_number("no pr") is None
    assert compare_url("", "a", "b") == "" and commit_url("", "a") == ""


URL = "https://github.com/vllm-project/vllm"


def test_report_md_shows_hostile_commits_servers_and_logs_as_text(
    tmp_path: Path, history: Any
) -> None:
    """A real run over a history whose subjects, authors and end tags, the culprit's replies
    and an untestable build's log are markup, mentions, fences and terminal escapes: rendered
    as GitHub renders it, report.md holds none of it as markup, and every word of it as text;
    its Reproduce lines run nothing in `sh`."""
    subject = HOSTILE_LINE.replace("\x00", "")  # git keeps NUL out of commit messages
    h: History = history(
        {4: "crash-on-start", 5: "none", 6: "degenerate-content"},
        n=8,
        subjects={i: f"{subject} (#2400{i})" for i in range(1, 9)},
        authors=dict.fromkeys(
            range(9), ("@everyone ![t](https://track.example/a.png)", "x@evil.example")
        ),
        changes={
            4: {"log_lines": HOSTILE_LOG},
            5: {"log_lines": []},
            6: {"hostile": {"say": HOSTILE_LINE}},
        },
    )
    good, bad = HOSTILE_TAGS[1], HOSTILE_TAGS[0]
    for tag, sha in ((good, h.shas[0]), (bad, h.shas[-1])):
        subprocess.run(["git", "-C", str(h.repo), "tag", tag, sha], check=True)
    folder = tmp_path / "cfg $(touch pwned-cfg)"
    folder.mkdir()
    config = folder / "run `touch pwned-tick`;touch pwned-semi.yaml"
    config.write_text(h.config(good=good, bad=bad, candidates={"url": URL}).read_text())
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = ResultDocument.model_validate_json((out / "result.json").read_bytes())
    assert result.culprit is not None and result.culprit.commit == h.shas[6]
    assert any(p.verdict is Verdict.SKIP and p.log_tail for p in result.probes)

    shown = github_render((out / "report.md").read_text(), URL)
    assert shown.problems == []
    assert shown.headings[0].startswith(f"llm-bisect: {h.shas[6][:12]} </details><img src=x")
    for said in (
        "</details><img src=x onerror=alert(1)> @octocat red",  # subjects, replies, the log
        "@everyone ![t](https://track.example/a.png) <x@evil.example>",  # the author
        f"good {good} (",  # the refs as given
        f"bad {bad} (",
    ):
        assert said in shown.text, said
    log = [content for info, content in shown.fences if not info]
    assert len(log) == 1 and "```\n</details><img src=x onerror=alert(1)> @octocat" in log[0]
    commands = [content for info, content in shown.fences if info == "bash"]
    cwd = tmp_path / "sh"
    cwd.mkdir()
    first, second = (shell_words(line, cwd) for line in commands[0].splitlines())
    golden = ["--golden", str(out / "golden.json")]
    assert first == ["llm-bisect", "check", str(config), "--candidate", h.shas[6], *golden]
    assert second == ["llm-bisect", "check", str(config), "--candidate", h.shas[5], *golden]
    server = [w for w in shell_words(commands[1], cwd) if not w.startswith(CACHE_VARIABLES)]
    assert server[0] == sys.executable  # the server's command line, after its engine cache
    assert list(cwd.iterdir()) == [], "the pasted lines ran commands"


def test_an_output_that_ends_early_shows_where_it_parts_from_the_golden() -> None:
    from llm_bisect.report.documents import CheckDoc, ProbeDoc
    from llm_bisect.report.markdown import divergences

    case = {"prompt": "hello how are you", "first_divergence": 8, "divergence": None}
    logprobs = CheckDoc(name="logprobs", passed=False, score=0.2, details={"cases": [case]})
    probe = ProbeDoc(commit="a" * 40, verdict=Verdict.BAD, checks=[logprobs])
    (row,) = [line for line in divergences(probe) if "hello how are you" in line]
    assert row == "| 'hello how are you' | 8 | — | — | 0.000 | one output ends here |"


def test_verdicts_that_are_not_monotone_are_said_with_what_each_re_probe_found() -> None:
    # 1 tested bad, then good when probed again (flaky); 2 good after it; 3 bad: the
    # search says so, and the report lists every probe of the builds probed again.
    plan = Plan(Mode.REGRESSION, SEQ)
    probes = [
        outcome(0, Verdict.GOOD),
        outcome(4, Verdict.BAD),
        outcome(1, Verdict.BAD),
        outcome(2, Verdict.GOOD),
        outcome(1, Verdict.GOOD),
        outcome(2, Verdict.GOOD),
        outcome(3, Verdict.BAD),
    ]
    seen: dict[str, list[Verdict]] = {}
    for p in probes:
        seen.setdefault(p.commit, []).append(p.verdict)
    answer = plan_step(plan, seen, reprobe=True)
    assert isinstance(answer, Answer) and answer.culprit == SEQ[3]
    result = build_result(plan, answer, probes).model_dump(mode="json")
    assert result["retests"] == [
        {"commit": SEQ[1].commit, "verdicts": ["bad", "good"], "flaky": True},
        {"commit": SEQ[2].commit, "verdicts": ["good", "good"], "flaky": False},
    ]
    md = render_markdown(result)
    assert "## Caveats" in md
    assert f"- ⚠ Flaky: {SEQ[1].short} tested both good and bad" in md
    assert f"- `{SEQ[1].short}`: bad, then good — flaky, counted unsure" in md
    # without the re-probes the same first verdicts stand: the reversal is said, not hidden
    answer = plan_step(plan, {c: v[:1] for c, v in seen.items()})
    assert isinstance(answer, Answer) and answer.culprit == SEQ[3]
    assert answer.reversals == ((SEQ[1].commit, SEQ[2].commit),)
    result = build_result(plan, answer, probes[:4] + probes[6:]).model_dump(mode="json")
    assert result["reversals"] == [{"new": SEQ[1].commit, "old": SEQ[2].commit}]
    md = render_markdown(result)
    assert f"good at {SEQ[2].short} after bad at {SEQ[1].short}" in md
    assert "Verdicts are not monotone" in md and "probe.repeats: auto" in md


def test_builds_compared_show_each_sides_backends_and_ranks_that_disagree() -> None:
    """The backend lines maintainers ask for, per side; a switch listed among the changes;
    a build whose TP ranks chose different attention backends said so, with each rank's."""
    good = parse_startup_log(
        "(Worker_TP0 pid=1) INFO [cuda.py:486] Using FLASH_ATTN attention backend out of "
        "potential backends: ['FLASH_ATTN'].\n"
        "(Worker_TP0 pid=1) INFO [nvfp4.py:216] Using 'VLLM_CUTLASS' NvFp4 MoE backend."
    )
    bad = parse_startup_log(
        "".join(
            f"(Worker_TP{r} pid={r}) INFO [cuda.py:486] Using {b} attention backend out of "
            f"potential backends: ['{b}'].\n(Worker_TP{r} pid={r}) INFO [nvfp4.py:216] Using "
            "'MARLIN' NvFp4 MoE backend.\n"
            for r, b in enumerate(["FLASH_ATTN", "FLASH_ATTN", "FLASHINFER"])
        )
    )
    plan = Plan(Mode.REGRESSION, SEQ)
    answer = Answer(Status.FOUND, SEQ[3], (SEQ[2].commit, SEQ[3].commit), "first bad found")
    probes = [
        outcome(0, Verdict.GOOD),
        outcome(4, Verdict.BAD),
        dataclasses.replace(outcome(2, Verdict.GOOD), fingerprint={"kernels": good}),
        dataclasses.replace(outcome(3, Verdict.BAD), fingerprint={
            "kernels": bad, "slurm": {"job": "7", "avoid": ["gpu-17"], "avoided": False}}),
    ]  # fmt: skip
    md = render_markdown(build_result(plan, answer, probes))
    assert "| **⚠ kernels.moe_backend** | VLLM_CUTLASS | MARLIN |" in md, md
    # the nodes a re-probe kept off are where it ran, not what the build is
    assert "`slurm.avoid" not in md.split("Changed besides the build's identity")[1], md
    assert "| kernels.moe_quant | NvFp4 | NvFp4 |" in md, md
    assert "Changed besides the build's identity: `kernels.attention_backend`, " in md
    assert (
        "⚠ The first bad build's ranks disagree on `kernels.attention_backend`: FLASH_ATTN "
        "(Worker_TP0, Worker_TP1); FLASHINFER (Worker_TP2)"
    ) in md, md


def test_how_long_a_build_took_is_not_a_change_between_builds() -> None:
    """Two overlays of the same base differ in build seconds and cache hits on every run:
    shown side by side, never listed among the changes a maintainer should read."""
    plan = Plan(Mode.REGRESSION, SEQ)
    answer = Answer(Status.FOUND, SEQ[3], (SEQ[2].commit, SEQ[3].commit), "first bad found")
    build = {"route": "overlay", "written": 2}
    probes = [
        outcome(0, Verdict.GOOD),
        outcome(4, Verdict.BAD),
        dataclasses.replace(
            outcome(2, Verdict.GOOD),
            fingerprint={
                "build": {**build, "seconds": 0.223, "cached": True},
                "slurm": {"job": "41", "queued_s": 0.5, "start_s": 30.1, "tries": 1},
            },
        ),
        dataclasses.replace(
            outcome(3, Verdict.BAD),
            fingerprint={
                "build": {**build, "seconds": 0.214, "cached": False},
                "slurm": {"job": "42", "queued_s": 2.5, "start_s": 31.7, "tries": 2},
            },
        ),
    ]
    md = render_markdown(build_result(plan, answer, probes))
    assert "| build.seconds | 0\\.223 | 0\\.214 |" in md, md  # shown, never marked ⚠
    assert "Changed besides the build's identity" not in md, md


DEPLOYMENT_ENV = {
    "NCCL_MNNVL_ENABLE": "1",
    "VLLM_USE_V2_MODEL_RUNNER": "1",
    "HF_TOKEN": "hf_reproduceSecret1234",
    "HTTPS_PROXY": "http://bob:proxyPass9876@proxy:3128",  # a login under an ordinary name
}


@pytest.fixture(scope="module")
def relative_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run started in the config's folder with relative paths (`run config.yaml --out
    out`), whose server environment holds deployment flags and a token; its DIR."""
    h = History(tmp_path_factory.mktemp("relative"), {5: "degenerate-content"}, 8)
    h.config(server={"env": DEPLOYMENT_ENV})
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", "run", "config-1.yaml", "--out", "out"],
        cwd=h.root,
        env=cli_on_path(h.root / "bin"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return h.root / "out"


def test_the_reproduce_commands_run_as_printed_from_another_folder(
    relative_run: Path, tmp_path: Path
) -> None:
    """report.md's `check` lines, pasted into `sh` in a folder that is not the run's,
    reproduce what they say: the bad build exits 1, the good one 0 (the config, the golden
    the run recorded into DIR, everything by absolute path)."""
    out = relative_run
    commands = printed_commands((out / "report.md").read_text())
    assert [code for _, code in commands] == [1, 0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = cli_on_path(tmp_path / "bin")
    for line, code in commands:
        done = subprocess.run(
            ["sh", "-c", line], cwd=elsewhere, env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == code, f"{line}\n{done.stdout}{done.stderr}"
    assert f"--golden {out / 'golden.json'}" in commands[0][0]


def test_the_server_command_shows_its_environment_with_values_but_secrets(
    relative_run: Path, tmp_path: Path
) -> None:
    """What a maintainer asks for: the flags the server ran with, values and all; a token by
    its name only (the line takes the reader's own)."""
    out = relative_run
    md = (out / "report.md").read_text()
    fences = [c for info, c in github_render(md).fences if info == "bash"]
    (tmp_path / "sh").mkdir()
    words = shell_words(fences[1], tmp_path / "sh")
    # the engine cache's folders (on by default) are in the line too, values and all
    cached = [w.partition("=") for w in words if w.startswith(CACHE_VARIABLES)]
    assert [name for name, _, _ in cached] == sorted(CACHES)
    root = Path(os.environ["XDG_CACHE_HOME"], "llm-bisect", "engine-cache")
    assert all(Path(v).parent.parent.parent == root for _, _, v in cached), cached
    words = [w for w in words if not w.startswith(CACHE_VARIABLES)]
    token = "HF_TOKEN=" + os.environ.get("HF_TOKEN", "")  # the reader's own
    assert words[:4] == [
        token,
        "HTTPS_PROXY=http://***@proxy:3128",
        "NCCL_MNNVL_ENABLE=1",
        "VLLM_USE_V2_MODEL_RUNNER=1",
    ]
    assert words[4] == sys.executable
    assert 'HF_TOKEN="$HF_TOKEN"' in fences[1]
    for document in ("report.md", "report.html", "result.json", "journal.jsonl", "golden.json"):
        text = (out / document).read_text()
        assert "hf_reproduceSecret1234" not in text and "proxyPass9876" not in text, document


def test_the_report_stands_alone_in_an_issue_its_portable_lines_run_by_the_attachments(
    relative_run: Path, tmp_path: Path
) -> None:
    """report.md pasted into an issue with golden.json attached: the config it embeds saved
    as config.yaml beside the golden and a clone of the repository, in a folder of their
    own, its portable lines pasted into `sh` there exit as they say. The config it embeds
    holds the token by its name (the reader's own) and no secret; nothing of this machine's
    paths is in those lines; GitHub shows it as written."""
    out = relative_run
    md = (out / "report.md").read_text()
    shown = github_render(md)
    assert shown.problems == []
    assert "hf_reproduceSecret1234" not in md and "proxyPass9876" not in md
    (config,) = [c for info, c in shown.fences if info == "yaml"]
    env = yaml.safe_load(config)["server"]["env"]
    assert env["HF_TOKEN"] == "${HF_TOKEN}" and env["HTTPS_PROXY"] == "http://***@proxy:3128"
    assert "<summary><b>config.yaml</b>" in md and "attach `golden.json`" in md
    issue = tmp_path / "issue"
    commands = as_in_an_issue(md, out / "golden.json", out.parent / "engine", issue)
    result = ResultDocument.model_validate_json((out / "result.json").read_bytes())
    bad, good = result.range[-1], result.range[0]
    assert [shell_words(line, tmp_path) for line, _ in commands] == [
        ["llm-bisect", "check", "config.yaml", "--candidate", c, "--golden", "golden.json",
         "--repo", "repo"]
        for c in (bad, good)
    ]  # fmt: skip
    assert [code for _, code in commands] == [1, 0]
    reader = {**cli_on_path(tmp_path / "bin"), "HF_TOKEN": "hf_readersOwn"}
    for line, code in commands:
        done = subprocess.run(["sh", "-c", line], cwd=issue, env=reader, capture_output=True,
                              text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == code, f"{line}\n{done.stdout}{done.stderr}"


def test_the_printed_curl_shows_the_symptom_from_the_server_started_as_printed(
    relative_run: Path, tmp_path: Path
) -> None:
    """Without llm-bisect: the first bad build's server line as report.md prints it, then
    its `curl` of the canary's first failing prompt, each pasted into `sh`: the reply is the
    degenerate text the report names."""
    if shutil.which("curl") is None:
        pytest.skip("no curl on this machine")
    md = (relative_run / "report.md").read_text()
    fences = github_render(md).fences
    server = [c for info, c in fences if info == "bash"][1].strip()
    (curl,) = [x for info, c in fences if info == "sh" for x in c.splitlines()
               if x.startswith("curl ")]  # fmt: skip
    words = shell_words(curl, tmp_path)
    body = json.loads(words[words.index("-d") + 1])
    assert body["messages"][0]["role"] == "user" and body["temperature"] == 0.0
    assert any(
        "content degenerate" in x for info, c in fences if info == "sh" for x in c.splitlines()
    )
    env = {**cli_on_path(tmp_path / "bin"), "HF_TOKEN": "hf_readersOwn"}
    reply = served_as_printed(server, curl, tmp_path / "elsewhere", env)
    content = json.loads(reply)["choices"][0]["message"]["content"]
    assert degeneration(content), content


def _docker_build(fp: dict[str, Any], image: dict[str, str], torch: str) -> None:
    """A probe's fingerprint as the docker launcher records it (its `docker run` line by tag)."""
    spec = {
        "device_requests": [{"Count": -1}],
        "ports": {"8000/tcp": ("127.0.0.1", 8123)},
        "environment": {"HF_TOKEN": "x", "VLLM_USE_V2_MODEL_RUNNER": "1"},
        "command": ["--model", "RedHatAI/Kimi-K3-NVFP4", "--tensor-parallel-size", "8"],
    }
    fp["image"] = {**image, "labels": {}}
    fp["command"] = run_line(spec, image["ref"], {"HF_TOKEN"})
    fp["endpoint"] = "http://127.0.0.1:8123"
    fp["packages"] = {"torch": torch, "flashinfer": "0.6.16", "vllm": "0.27.0"}


@pytest.mark.parametrize("registry", [True, False], ids=["digest", "image id"])
def test_a_docker_build_is_run_by_digest_and_named_by_it_on_the_first_screen(
    relative_run: Path, tmp_path: Path, registry: bool
) -> None:
    """A docker run's first bad build: its `docker run` for the issue names the image by its
    digest (one built here and never pushed: by its image id, said so), the rest of the line
    as it ran; the first screen names both builds' images, the torch bump and the backends."""
    data = json.loads((relative_run / "result.json").read_text())
    bad = data["range"][-1]
    ref = "vllm/vllm-openai:v0.27.0"
    digest, image_id = "sha256:" + "ab" * 32, "sha256:" + "cd" * 32
    image = {"ref": ref, "digest": f"vllm/vllm-openai@{digest}" if registry else "",
             "id": image_id}  # fmt: skip
    for probe in [*data["probes"], *data.get("decisive", [])]:
        if probe["commit"] == bad:
            _docker_build(probe["fingerprint"], image, "2.9.1")
    _docker_build(data["fingerprints"]["new"], image, "2.9.1")
    old = {"ref": "vllm/vllm-openai:nightly", "digest": f"vllm/vllm-openai@sha256:{'ef' * 32}"}
    _docker_build(data["fingerprints"]["old"], {**old, "id": "sha256:" + "12" * 32}, "2.9.0")
    data["fingerprints"]["differences"] += ["packages.torch", "image.digest"]
    md = render_markdown(data)
    assert github_render(md).problems == []
    pinned = f"vllm/vllm-openai@{digest}" if registry else image_id
    seen = first_screen(md)
    assert f"`vllm/vllm-openai@sha256:{'ef' * 32}`" in seen and f"`{pinned}`" in seen
    # flashinfer the same; vllm is the build itself, not a dependency
    assert "torch `2.9.0` → `2.9.1`" in seen and "(1 the same)" in seen
    assert "attention `" in seen or "**⚠ attention**" in seen
    assert ("image id" in seen) is not registry
    (line,) = [x for info, c in github_render(md).fences if info == "sh" for x in c.splitlines()
               if x.startswith("docker run")]  # fmt: skip
    words = shell_words(line, tmp_path)
    assert (
        words[: words.index(pinned)]
        == shell_words(data["fingerprints"]["new"]["command"], tmp_path)[: words.index(pinned)]
    )
    assert ref not in words and words[words.index(pinned) + 1 :][:2] == [
        "--model",
        "RedHatAI/Kimi-K3-NVFP4",
    ]
    if not registry:
        assert "its image id `" in md and "push it to share it" in md


def test_the_first_screen_names_the_backends_and_a_clone_line_comes_from_the_address(
    relative_run: Path,
) -> None:
    """The first screen of a simulated run states the backends its startup logs named; with
    the repository's address known, the block for an issue clones it into its last name."""
    md = (relative_run / "report.md").read_text()
    assert "- backends (last good → first bad): " in first_screen(md)
    data = json.loads((relative_run / "result.json").read_text())
    data["context"]["repo_url"] = URL
    commands = [c for info, c in github_render(render_markdown(data)).fences if info == "sh"]
    assert commands[0].splitlines()[0] == f"git clone {URL} vllm"
    assert commands[0].splitlines()[1].endswith("--repo vllm   # expect bad: exit 1")


def test_a_build_whose_probes_ran_on_several_nodes_names_the_node_of_each_verdict() -> None:
    """Each probe's node is a column of the probe table; a build probed again on two nodes
    says which node gave which verdict (a node that lies shows); one node: as before."""
    plan = Plan(Mode.REGRESSION, SEQ)

    def on(node: str, p: ProbeOutcome) -> ProbeOutcome:
        return dataclasses.replace(p, fingerprint=p.fingerprint.merged(Fingerprint(node=node)))

    probes = [
        on("gpu-01", outcome(0, Verdict.GOOD)),
        on("gpu-01", outcome(4, Verdict.BAD)),
        on("gpu-02", outcome(1, Verdict.BAD)),
        on("gpu-01", outcome(2, Verdict.GOOD)),
        on("gpu-01", outcome(1, Verdict.GOOD)),
        on("gpu-01", outcome(2, Verdict.GOOD)),
        on("gpu-01", outcome(3, Verdict.BAD)),
    ]
    seen: dict[str, list[Verdict]] = {}
    for p in probes:
        seen.setdefault(p.commit, []).append(p.verdict)
    answer = plan_step(plan, seen, reprobe=True)
    assert isinstance(answer, Answer)
    md = render_markdown(build_result(plan, answer, probes).model_dump(mode="json"))
    assert f"- `{SEQ[1].short}`: bad (on gpu-02), then good (on gpu-01) — flaky" in md
    assert f"- `{SEQ[2].short}`: good, then good" in md  # one node: nothing to tell apart
    assert "| reason | seconds | node |" in md and "| 1.2 | gpu-02 |" in md


FIRST_SCREEN_CULPRIT = "[Kernel] Bump FlashInfer to 0.6.16.post3 <img src=x> @octocat (#24005)"


@pytest.fixture(scope="module")
def bumped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[History, Path, str]:
    """The Kimi shape on the simulator: the culprit bumps FlashInfer (its collect_env says
    so) and switches the attention backend; a posterior search with confirmation. The
    History, DIR and what `run` printed on stdout."""
    root = tmp_path_factory.mktemp("bumped")
    bump = {"packages": {"flashinfer-python": "0.6.16.post3"}, "attention_backend": "FLASHINFER"}
    h = History(root, {5: "degenerate-reasoning"}, 8, changes={5: bump},
                subjects={5: FIRST_SCREEN_CULPRIT})  # fmt: skip
    collect = [sys.executable, "-m", "llm_bisect.sim.collect_env", "--repo", str(h.repo)]
    smi = stand_in_smi(root / "smi")
    server = {"collect_env": [*collect, "--commit", "{commit}"],
              "env": {"PATH": f"{smi}{os.pathsep}{os.environ['PATH']}"}}  # fmt: skip
    config = h.config(server=server, search={"flake": "auto"})
    out = root / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return h, out, done.stdout


def _in_order(text: str, marks: list[str]) -> list[int]:
    """Where each mark first shows in `text`, asserting each shows after the one before."""
    at, found = 0, []
    for mark in marks:
        i = text.find(mark, at)
        assert i >= 0, f"{mark!r} not after {text[:at][-200:]!r} in:\n{text}"
        found.append(i)
        at = i + len(mark)
    return found


def test_the_first_40_lines_hold_the_maintainers_items_in_their_order(
    bumped_run: tuple[History, Path, str],
) -> None:
    """report.md's first 40 lines, and report.html's top, give what the maintainers asked for
    in their order: the answer and how sure it is with the lies assumed; both ends' images
    (no registry digest here); the dependency versions that changed (only FlashInfer: the
    others left out, and vLLM's own version is no dependency); the backends, the change
    marked; the culprit's first token-id divergence; each check's number; a doubted node."""
    h, out, _ = bumped_run
    data = json.loads((out / "result.json").read_text())
    culprit = h.shas[5][:12]
    # three nodes, the second reading bad where the others read good: a doubted node
    extra = []
    good = {p["commit"]: p for p in data["probes"] if p["verdict"] == "good"}
    assert len(good) >= 2, data["probes"]
    for probe in list(good.values())[:2]:
        on = [{**probe["fingerprint"], "node": node} for node in ("gpu-2", "gpu-3")]
        extra += [{**probe, "slot": 1, "verdict": "bad", "fingerprint": on[0]},
                  {**probe, "slot": 2, "fingerprint": on[1]}]  # fmt: skip
    data["probes"] += extra
    nightly = f"vllm/vllm-openai@sha256:{'ef' * 32}"  # the good end ran from an image
    for probe in data["probes"]:
        if probe["commit"] == h.shas[0]:
            probe["fingerprint"]["image"] = {"ref": "vllm/vllm-openai:nightly", "digest": nightly}
    doc = ResultDocument.model_validate(data)
    md = render_doc(doc)
    assert github_render(md).problems == []
    top = "\n".join(md.splitlines()[:40])
    marks = [
        f"> **found** · first bad commit: `{culprit}` \\[Kernel\\] Bump FlashInfer",
        "(posterior ",
        "> lies assumed (`search.flake: auto`): verdicts may lie",
        f"- images: good end `{nightly}` · last good no image: no registry digest · first bad "
        "no image: no registry digest · bad end no image: no registry digest\n",
        "- dependencies changed (last good → first bad): flashinfer `0.6.16` → "
        "`0.6.16.post3` (6 the same)\n",  # torch, triton, ..., CUDA runtime, driver
        "- backends (last good → first bad): **⚠ attention** `FLASH_ATTN` → `FLASHINFER`",
        f"- first token divergence (`{culprit}` vs the golden): 'hello how are you' at token 2: "
        "golden `15505` ' well,' → now `11038` ' we', Δlogprob ",
        f"- checks on the first bad build `{culprit}` (in brackets: the last good build "
        f"`{h.shas[4][:12]}`)",
        "  - `canary` **FAIL**: 3 of 3 prompts failed (0 of 3 prompts failed)",
        "  - `logprobs` **FAIL**: 4 of 4 prompts not close to the golden (0 of 4",
        "  - `eval` **FAIL**: accuracy 0.0% on 64 (accuracy ",
        "- ⚠ node gpu-2, disagreed with the other nodes on 2 of 2 candidates: a bad node?",
    ]
    _in_order(top, marks)
    assert "**Status:**" in md.split(marks[-1])[1]  # the details below, as before
    # the HTML top from the same facts, in the same order, before the first plot
    page = render_html(doc)
    head = page.split('<div id="plot-')[0]
    _in_order(head, [
        f"<b>found</b> · first bad commit: <code>{culprit}</code> [Kernel] Bump FlashInfer "
        "to 0.6.16.post3 &lt;img src=x&gt; @octocat", "(posterior ", "lies assumed (",
        f'data-fact="images">images: good end <code>{nightly}</code>',
        'data-fact="dependencies">dependencies changed (last good → first bad): '
        "flashinfer <code>0.6.16</code> → <code>0.6.16.post3</code>",
        'data-fact="backends">backends (last good → first bad): '
        "<b>⚠ attention</b> <code>FLASH_ATTN</code> → <code>FLASHINFER</code>",
        'data-fact="divergence">first token divergence', 'data-fact="checks">',
        'data-fact="check"><code>canary</code> <b>FAIL</b>', 'data-fact="doubted">⚠ node gpu-2',
    ])  # fmt: skip
    assert "<img" not in head


def test_run_ends_with_a_banner_to_paste_into_an_issue(
    bumped_run: tuple[History, Path, str],
) -> None:
    """`run`'s last lines: at most 12 lines of markdown, escaped as report.md is, with the
    answer and how sure it is, the confirmation, what changed, the first divergence and the
    report's path; then the two lines scripts read, as before."""
    h, out, stdout = bumped_run
    lines = stdout.rstrip("\n").splitlines()
    assert lines[-2].startswith(f"found: {h.shas[5]} ") and lines[-1] == (
        f"report: {out / 'report.md'}"
    )
    start = next(i for i, x in enumerate(lines) if x.startswith("**llm-bisect**"))
    shown = lines[start : lines.index("", start)]
    assert len(shown) <= 12, shown
    text = "\n".join(shown)
    assert github_render(text).problems == [], text  # no raw HTML, no @mention
    culprit = h.shas[5][:12]
    _in_order(text, [
        f"**llm-bisect** **found** · first bad commit: `{culprit}` \\[Kernel\\] Bump "
        "FlashInfer to 0.6.16.post3 \\<img src=x\\> \\@\u200boctocat (#24005) (posterior ",
        "\n- confirmation: **confirmed**: reverting it fixes the bad end",
        "\n- changed (last good → first bad): attention `FLASH_ATTN` → `FLASHINFER`, "
        "flashinfer `0.6.16` → `0.6.16.post3`",  # nothing else changed
        f"\n- first token divergence (`{culprit}` vs the golden): 'hello how are you' at token 2",
        f"\n- report: `{(out / 'report.md').absolute()}`",
    ])  # fmt: skip
    assert "- changed (last good → first bad): attention `FLASH_ATTN` → `FLASHINFER`, " \
        "flashinfer `0.6.16` → `0.6.16.post3`" in shown  # fmt: skip
