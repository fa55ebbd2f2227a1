"""Dependency bumps read from real vLLM commits' diffs (tests/corpus/*.diff, `git show` of
neuralmagic/vllm's f18e10a7e1 and 75ccdf3145, limited to docker/, requirements/ and
the package files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llm_bisect.pins import Bump, bumps

CORPUS = Path(__file__).parent / "corpus"


def test_the_flashinfer_bump_names_each_package_and_where_it_is_pinned() -> None:
    found = bumps((CORPUS / "vllm_flashinfer_bump.diff").read_text())
    assert [b.label for b in found] == [
        "flashinfer-python 0.6.15.post1 → 0.6.16.post3",
        "flashinfer-cubin 0.6.15.post1 → 0.6.16.post3",
        "flashinfer-jit-cache 0.6.15.post1 → 0.6.16.post3",  # ARG FLASHINFER_VERSION's package
    ]
    assert found[2].files == ("docker/Dockerfile", "docker/versions.json")
    assert (found[0].old_version, found[0].new_version) == ("0.6.15.post1", "0.6.16.post3")


def test_the_torch_bump_reads_quoted_pins_markers_and_local_versions() -> None:
    found = {b.name: b for b in bumps((CORPUS / "vllm_torch_bump.diff").read_text())}
    assert found["torch"].label == "torch 2.11.0 → 2.13.0"
    assert "pyproject.toml" in found["torch"].files
    assert "requirements/cpu.txt" in found["torch"].files  # torch==2.11.0+cpu; platform_...
    assert found["torchvision"].label == "torchvision 0.26.0 → 0.28.0"
    assert found["CUDA_VERSION"].label == "CUDA_VERSION 13.0.2 → 13.0.3"


def test_ranges_additions_removals_and_unchanged_pins() -> None:
    diff = "\n".join(
        [
            "diff --git a/requirements/common.txt b/requirements/common.txt",
            "--- a/requirements/common.txt",
            "+++ b/requirements/common.txt",
            "@@ -1,4 +1,4 @@",
            "-numba >= 0.61, < 0.62 # comment",
            "+numba >= 0.62, < 0.63 # comment",
            "-old-thing==1.0",
            "+new-thing==2.0",
            " unchanged==3.0",
            "-Same_Name==1.0",
            "+same-name==1.0",
            "diff --git a/vllm/x.py b/vllm/x.py",
            "--- a/vllm/x.py",
            "+++ b/vllm/x.py",
            "-requests==1.0",
            "+requests==2.0",
        ]
    )
    assert bumps(diff) == [
        Bump("numba", "<0.62,>=0.61", "<0.63,>=0.62", ("requirements/common.txt",)),
        Bump("new-thing", "", "==2.0", ("requirements/common.txt",)),
        Bump("old-thing", "==1.0", "", ("requirements/common.txt",)),
    ]  # a source file's strings are no pins; a renamed spelling is the same package
    assert bumps(diff)[0].label == "numba <0.62,>=0.61 → <0.63,>=0.62"
    assert bumps(diff)[1].label == "new-thing (none) → 2.0"


def _commit(repo: Path, message: str, files: dict[str, str]) -> str:
    import subprocess

    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", message], check=True)
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def test_the_dry_run_flags_the_candidates_that_bump_a_pin(history: Any, tmp_path: Path) -> None:
    """As seed 000's reporter triaged by hand: which commits of the range change a pin."""
    import json

    from typer.testing import CliRunner

    from llm_bisect.cli import cli
    from llm_bisect.pins import range_bumps

    h = history({}, n=3)
    pinned = _commit(
        h.repo, "[CI] pin flashinfer", {"requirements/cuda.txt": "flashinfer-python==0.5.2\n"}
    )
    docs = _commit(h.repo, "[Doc] words", {"docs/x.md": "x\n"})
    bump = _commit(h.repo, "[Kernel] Bump FlashInfer to 0.5.3",
                   {"requirements/cuda.txt": "flashinfer-python==0.5.3\n"})  # fmt: skip
    tip = _commit(h.repo, "[Misc] tidy", {"docs/y.md": "y\n"})
    found = range_bumps(h.repo, [pinned, docs, bump, tip])
    assert {c: [b.label for b in said] for c, said in found.items()} == {
        pinned: ["flashinfer-python (none) → 0.5.2"],
        bump: ["flashinfer-python 0.5.2 → 0.5.3"],
    }
    config = h.config(bad=tip)
    result = CliRunner().invoke(cli, ["candidates", str(config)])
    assert result.exit_code == 0, result.output
    rows = {
        line.split()[1]: line for line in result.output.splitlines() if line[:4].strip().isdigit()
    }
    assert rows[bump[:12]].endswith("[bumps flashinfer-python 0.5.2 → 0.5.3]"), result.output
    assert "bumps" not in rows[docs[:12]] and "bumps" not in rows[tip[:12]]
    assert "2 candidate(s) bump a dependency pin (marked)" in result.output
    result = CliRunner().invoke(cli, ["candidates", str(config), "--json"])
    by = {c["commit"]: c["bumps"] for c in json.loads(result.output)["candidates"]}
    assert by[bump] == ["flashinfer-python 0.5.2 → 0.5.3"] and by[docs] == []
