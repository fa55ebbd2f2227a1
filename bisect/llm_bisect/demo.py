"""`llm-bisect demo`: a real bisection of a made-up engine history on the simulated server.

The history has 40 commits after the good nightly. One of them makes the
reasoning channel degenerate (`G now now now ...`) while /health stays green;
one earlier commit does not start at all (untestable, fixed by the next one).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import git
import yaml

CULPRIT_SUBJECT = "[Kernel] Bump FlashInfer to 0.5.3, enable TRTLLM-gen attention for FP4"
_SUBJECTS = [
    "[Bugfix] Fix tokenizer warm-up for long prompts",
    "[CI] Split the entrypoints test job",
    "[Doc] Explain the --enforce-eager trade-off",
    "[Model] Add rope scaling to the Llama loader",
    "[Core] Cache block hashes across requests",
    "[Frontend] Accept reasoning_effort in chat requests",
    "[Perf] Fuse the RMSNorm and quantization epilogue",
    "[Misc] Tidy the scheduler's logging",
    "[Bugfix] Keep stop strings that span two tokens",
    "[CI] Retry flaky downloads in the model tests",
    "[Doc] Document the prefix caching metrics",
    "[Model] Load tied embeddings for small Qwen checkpoints",
    "[Core] Free KV blocks of aborted requests sooner",
    "[Frontend] Return usage in streamed completions",
    "[Perf] Overlap the sampler with the next step's scheduling",
    "[Misc] Remove an unused environment variable",
    "[Bugfix] Handle empty tool call arguments",
    "[CI] Pin the lint job's ruff version",
    "[Doc] Add a troubleshooting page for NCCL timeouts",
    "[Model] Support sliding window in the Mistral loader",
    "[Core] Count preemptions per request",
    "[Frontend] Validate max_tokens against the context length",
    "[Perf] Vectorise the top-p mask",
    "[Misc] Rename the worker's init hooks",
    "[Bugfix] Restore the default chat template fallback",
    "[CI] Run the multi-node tests nightly only",
    "[Doc] Clarify tensor and expert parallel sizes",
    "[Model] Read quantization config from compressed-tensors metadata",
    "[Core] Batch detokenization of finished requests",
    "[Frontend] Log the served model name at startup",
    "[Perf] Skip an extra copy of the logits on CPU",
    "[Misc] Upgrade the pre-commit hooks",
    "[Bugfix] Close the metrics server on shutdown",
    "[CI] Cache the wheel build between jobs",
    "[Doc] Describe the structured output backends",
    "[Model] Fix the rotary base of long-context checkpoints",
    "[Core] Bound the waiting queue by memory",
    "[Frontend] Echo the request id in error replies",
    "[Perf] Tune the fused MoE block sizes for Hopper",
    "[Misc] Drop Python 3.9 leftovers",
]
"""One subject a commit, none repeated within the demo's history."""
N_COMMITS = 40
CULPRIT_INDEX = 27
UNBUILDABLE_INDEX = 20


def build_history(
    repo_dir: Path,
    faults: Mapping[int, str],
    *,
    n_commits: int = N_COMMITS,
    subjects: Mapping[int, str] | None = None,
    settings: Mapping[str, Any] | None = None,
    changes: Mapping[int, Mapping[str, Any]] | None = None,
    authors: Mapping[int, tuple[str, str]] | None = None,
) -> list[str]:
    """Create a linear history of n_commits + 1 commits; return their shas, oldest first.

    Commit i carries `sim-engine.json` with `faults[j]` of the highest j <= i
    that `faults` names (a fault persists until a later entry says "none"),
    merged over `settings` and every `changes[j]` with j <= i (e.g. a kernel
    backend switched by commit j); `authors[i]` (name, email) wrote commit i.
    """
    repo_dir = repo_dir.absolute()  # GitPython reads the index's paths from the process's cwd
    repo = git.Repo.init(repo_dir)
    actor = git.Actor("Demo Maintainer", "maintainer@example.com")
    start = datetime(2026, 8, 9, 9, 0, tzinfo=timezone.utc)
    engine = repo_dir / "sim-engine.json"
    (repo_dir / "notes").mkdir(parents=True, exist_ok=True)
    shas: list[str] = []
    fault = "none"
    current = dict(settings or {})
    for i in range(n_commits + 1):
        fault = faults.get(i, fault)
        current.update((changes or {}).get(i, {}))
        # a key a line, and each commit's note a file of its own: a revert or a pick of one
        # commit applies over later ones as it would in a real repository
        engine.write_text(json.dumps({**current, "fault": fault}, indent=1, sort_keys=True) + "\n")
        subject = (subjects or {}).get(i) or (
            "Nightly 2026-08-09" if i == 0 else f"{_SUBJECTS[i % len(_SUBJECTS)]} (#{24000 + i})"
        )
        note = repo_dir / "notes" / f"{i:03d}.md"
        note.write_text(f"- {subject}\n")
        repo.index.add([str(engine), str(note)])
        date = f"{int((start + timedelta(hours=3 * i)).timestamp())} +0000"
        author = git.Actor(*authors[i]) if authors and i in authors else actor
        commit = repo.index.commit(
            subject, author=author, committer=actor, author_date=date, commit_date=date
        )
        shas.append(commit.hexsha)
    repo.close()
    return shas


def build_demo_history(repo_dir: Path) -> list[str]:
    """The demo's repository; returns its shas, oldest first (culprit at CULPRIT_INDEX).

    A repository an earlier demo left in `repo_dir` is used as it is (a resumed demo).
    """
    if (repo_dir / ".git").is_dir():
        repo = git.Repo(repo_dir)
        listed: str = repo.git.rev_list("--reverse", "v0.27.0")
        repo.close()
        return listed.split()
    shas = build_history(
        repo_dir,
        {
            UNBUILDABLE_INDEX: "crash-on-start",
            UNBUILDABLE_INDEX + 1: "none",
            CULPRIT_INDEX: "degenerate-reasoning",
        },
        changes={CULPRIT_INDEX: {"attention_backend": "FLASHINFER"}},
        subjects={
            CULPRIT_INDEX: CULPRIT_SUBJECT,
            UNBUILDABLE_INDEX: "[Build] Require CUDA 13.1 kernels (breaks the image)",
            UNBUILDABLE_INDEX + 1: "[Build] Revert the CUDA 13.1 kernel requirement",
        },
    )
    repo = git.Repo(repo_dir)
    repo.create_tag("nightly-2026-08-09", ref=shas[0])
    repo.create_tag("v0.27.0", ref=shas[-1])
    repo.close()
    return shas


DOCKER_REPOSITORY = "llm-bisect-demo"
MISSING_IMAGE_INDEX = 34
"""With --docker, the commit whose image was never built (an untestable candidate)."""


def require_engine() -> None:
    """A LaunchError that says how to go on when no Docker engine answers."""
    from .errors import LaunchError
    from .sim.docker import engine_client

    try:
        engine_client().close()
    except LaunchError as exc:
        raise LaunchError(
            f"demo --docker: no Docker engine answers ({exc}); start one (dockerd), "
            "or run `llm-bisect demo` without --docker"
        ) from None


def build_demo_images(repo_dir: Path, shas: list[str]) -> list[str]:
    """The demo's images in the local engine, one per commit but one; returns their refs."""
    from .sim.docker import engine_client, import_history

    return import_history(
        engine_client(), repo_dir, shas, DOCKER_REPOSITORY, frozenset({MISSING_IMAGE_INDEX})
    )


def images_of(refs: list[str], commits: Sequence[str]) -> list[str]:
    """The images among `refs` of `commits` (an answer's range: the last good build and the
    culprit, which report.md's Reproduce and `docker run` lines run), in `refs`' order."""
    wanted = {f"{DOCKER_REPOSITORY}:{c}" for c in commits}
    return [ref for ref in refs if ref in wanted]


def remove_line(refs: list[str]) -> str:
    """The command that removes the images the demo kept, as printed."""
    return shlex.join(["docker", "rmi", *refs])


def remove_images(refs: list[str]) -> None:
    from .sim.docker import engine_client

    client = engine_client()
    for ref in refs:
        client.images.remove(ref, force=True)


def write_config(workdir: Path, repo_dir: Path, *, docker: bool = False) -> Path:
    """The demo's config, a plain file the user can read and copy (the default checks)."""
    server: dict[str, Any]
    if docker:
        from .sim.docker import sim_server

        server = sim_server(DOCKER_REPOSITORY + ":{commit}", pull="never")
    else:
        server = {
            "launcher": "process",
            "command": [
                sys.executable,
                "-m",
                "llm_bisect.sim",
                "--repo",
                str(repo_dir),
                "--commit",
                "{commit}",
                "--port",
                "{port}",
            ],
            "ready_timeout": 30,
        }
    config = {
        "candidates": {"repo": str(repo_dir), "good": "nightly-2026-08-09", "bad": "v0.27.0"},
        "server": server,
    }
    path = workdir / "demo.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
