"""The localisation service: the last good and first bad builds run with the worker
extension, and the first module whose output differs (localize.py judges).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..client import OpenAIClient
from ..config import config_digest
from ..errors import ConfigError, EndpointError, LaunchError, LocalizeError, RequestRejected
from ..launchers import Instrument
from ..localize import LocalizationDoc, localize as localize_results
from ..model import Candidate
from ..outdir import hold
from ..redact import Scrub
from ..report.documents import ResultDocument
from ..runner import write_atomic
from ..search import Mode, Status
from .setup import Setup, run_id_of

WORKER_DIR = Path(__file__).parent.parent / "data" / "worker"
"""Holds llm_bisect_worker.py, put first on a localisation probe's PYTHONPATH."""
EXTENSION = "llm_bisect_worker.Extension"
LOCALIZATION = "localization.json"


def localize_instrument() -> Instrument:
    """What a localisation probe adds to a vLLM server: eager mode (hooks do not fire in
    compiled graphs), no prefix cache (both runs compute every token), the extension."""
    return Instrument(
        args=(
            "--enforce-eager",
            "--no-enable-prefix-caching",
            "--worker-extension-cls",
            EXTENSION,
        ),
        env={"VLLM_SERVER_DEV_MODE": "1"},
        paths=(WORKER_DIR,),
    )


def _capture(api: OpenAIClient, token_ids: list[int], spec: str) -> tuple[list[Any], int]:
    """One teacher-forced forward over `token_ids` with hooks on every module: what each
    rank recorded, and its size in bytes."""
    try:
        api.rpc("llm_bisect_install", spec)
    except RequestRejected as exc:
        raise LocalizeError(
            f"the server has no /collective_rpc for the worker extension ({exc})"
        ) from None
    api.continuation(token_ids, 1)
    results = api.rpc("llm_bisect_collect")
    if not all(isinstance(r, dict) and "events" in r for r in results):
        raise LocalizeError(f"the worker extension answered {str(results)[:200]}")
    return results, len(json.dumps(results))


CAPTURE = "capture.json"
"""DIR/localize/<short>/capture.json: what a localisation probe recorded, reused by a later
`localize` into the same DIR (one last good build against several bad ones starts once)."""


def _capture_key(s: Setup, candidate: Candidate, prompt: str) -> str:
    """What a capture depends on: the build, the config that decides how it is served and
    checked, the tokens asked for, and the worker extension's own code."""
    cfg = s.config.localize
    worker = hashlib.sha256((WORKER_DIR / "llm_bisect_worker.py").read_bytes()).hexdigest()
    blob = {"commit": candidate.commit, "config": config_digest(s.config), "prompt": prompt,
            "tokens": cfg.tokens, "sample": cfg.sample, "worker": worker}  # fmt: skip
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def _stored_capture(
    probe_dir: Path, key: str, token_ids: list[int] | None, *, again: bool, saved: bool
) -> dict[str, Any] | None:
    """A capture this DIR holds of the same build and settings; None when there is none,
    it is of other tokens, lacks the good side's second run, or the tensors asked for."""
    try:
        doc = json.loads((probe_dir / CAPTURE).read_text())
    except (ValueError, OSError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("runs"), dict):
        return None
    if token_ids is not None and doc.get("token_ids") != token_ids:
        return None
    if (again and "again" not in doc["runs"]) or (saved and not doc.get("saved")):
        return None
    return doc


def localize_builds(
    s: Setup,
    good: Candidate,
    bad: Candidate,
    out_dir: Path,
    *,
    prompt: str | None = None,
    note: Callable[[str], None] = lambda _: None,
    bad_setup: Setup | None = None,
) -> LocalizationDoc:
    """Run the last good and the first bad build with the worker extension on the same
    tokens and say where their outputs first differ (localize.py). A build this DIR
    already captured with the same settings is not started again. LocalizeError when a
    build cannot be instrumented. `bad_setup`: the bad side served by another setup (one
    build, two server setups: `configs`)."""
    cfg = s.config.localize
    text = prompt or cfg.prompt
    note(
        f"localize: {good.short} (good) and {bad.short} (bad) with the worker extension; "
        "eager mode and no prefix cache for these two probes only"
    )
    token_ids: list[int] = []
    runs: dict[str, list[Any]] = {}
    seconds: dict[str, float] = {}
    reused: list[str] = []
    collected = 0
    for role, candidate in (("good", good), ("bad", bad)):
        rs = bad_setup if role == "bad" and bad_setup is not None else s
        with rs.launcher(run_id_of(out_dir, f"localize-{role}")) as launcher:
            for line in launcher.reap():
                note(line)
            t0 = s.clock()
            folder = candidate.short if good.commit != bad.commit else f"{candidate.short}-{role}"
            probe_dir = out_dir / "localize" / folder
            key = _capture_key(rs, candidate, text)
            stored = _stored_capture(
                probe_dir, key, token_ids if role == "bad" else None,
                again=role == "good", saved=cfg.save_tensors,
            )  # fmt: skip
            if stored is not None:
                note(f"localize: {candidate.short} ({role}) captured before; not started again")
                token_ids = token_ids or list(stored["token_ids"])
                runs[role] = stored["runs"]["first"]
                if role == "good":
                    runs["again"] = stored["runs"]["again"]
                reused.append(role)
                continue
            save = probe_dir / "tensors" if cfg.save_tensors else None
            spec = json.dumps({"sample": cfg.sample, "save": str(save) if save else None})
            captured: dict[str, list[Any]] = {}
            try:
                with launcher.launch(candidate, probe_dir, localize_instrument()) as server:
                    server.wait_ready()
                    with rs.client(server) as api:
                        if not token_ids:
                            token_ids = api.tokenize(text)
                            token_ids += api.continuation(token_ids, cfg.tokens)
                        captured["first"], size = _capture(api, token_ids, spec)
                        collected += size
                        if role == "good":  # the good build against itself: the noise
                            captured["again"], _ = _capture(api, token_ids, spec)
            except (LaunchError, EndpointError) as exc:
                raise LocalizeError(f"{role} build {candidate.short}: {exc}") from None
            seconds[role] = round(s.clock() - t0, 1)
            runs[role] = captured["first"]
            if "again" in captured:
                runs["again"] = captured["again"]
            doc = {"key": key, "commit": candidate.commit, "token_ids": token_ids,
                   "saved": save is not None, "runs": captured}  # fmt: skip
            probe_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(probe_dir / CAPTURE, json.dumps(doc) + "\n")
    found = localize_results(
        runs["good"],
        runs["bad"],
        runs["again"],
        floor=cfg.tolerance,
        tokens=len(token_ids),
        collected_bytes=collected,
    )
    return found.document(
        good=good.commit,
        bad=bad.commit,
        prompt=text,
        seconds=seconds,
        reused=reused,
        forced=list(localize_instrument().args),
    )


def localize_after_run(
    s: Setup,
    result: ResultDocument,
    out_dir: Path,
    note: Callable[[str], None],
    known: Mapping[str, Candidate] | None = None,
) -> LocalizationDoc | None:
    """After a run that found its culprit: localise it (unless `localize: false`), into
    DIR/localization.json; a resumed run reads what it wrote. None when there is nothing
    to localise."""
    pair = culprit_pair(result)
    if not s.config.localize.enabled or pair is None or s.config.regress == "start":
        return None  # under `start` the first bad build never serves: nothing to hook
    good, bad = pair
    done = stored_localization(out_dir, good, bad)
    if done is not None:
        return done
    try:
        known = known or {}
        doc = localize_builds(
            s,
            known.get(good) or s.source.resolve(good, "localize"),
            known.get(bad) or s.source.resolve(bad, "localize"),
            out_dir,
            note=note,
        )
    except LocalizeError as exc:
        doc = LocalizationDoc(good=good, bad=bad, error=str(exc), line=f"not localised: {exc}")
    return write_localization(out_dir, doc, s.scrub)


def write_localization(out_dir: Path, doc: LocalizationDoc, scrub: Scrub) -> LocalizationDoc:
    """DIR/localization.json, secrets masked; returns the document as written."""
    clean = scrub.doc(doc.model_dump(mode="json"))
    write_atomic(out_dir / LOCALIZATION, json.dumps(clean, indent=2) + "\n")
    return LocalizationDoc.model_validate(clean)


def culprit_pair(result: ResultDocument) -> tuple[str, str] | None:
    """(good, bad) commits a found result's culprit lies between: the last good and the first
    bad, or with --find-fix the fix and the commit before it. None unless found."""
    span = result.range
    if result.status is not Status.FOUND or len(span) < 2:
        return None
    old, new = span[0], span[-1]
    return (new, old) if result.mode is Mode.FIX else (old, new)


def stored_localization(out_dir: Path, good: str, bad: str) -> LocalizationDoc | None:
    """What DIR/localization.json says of these two builds; None when it is of others or
    cannot be read."""
    try:
        doc = LocalizationDoc.model_validate_json((out_dir / LOCALIZATION).read_bytes())
    except (ValueError, OSError):
        return None
    return doc if doc.good == good and doc.bad == bad else None


def with_localization(result: ResultDocument, out_dir: Path) -> ResultDocument:
    """result.json with what DIR/localization.json says of its culprit (`report DIR`)."""
    pair = culprit_pair(result)
    doc = stored_localization(out_dir, *pair) if pair is not None else None
    return result if doc is None else result.model_copy(update={"localization": doc})


def localize_refs(
    s: Setup,
    good: str,
    bad: str,
    out_dir: Path,
    *,
    prompt: str | None,
    note: Callable[[str], None],
) -> LocalizationDoc:
    """The `localize` command: two refs (or images), localised; DIR/localization.json."""
    good_c, bad_c = s.resolve(good, "--good"), s.resolve(bad, "--bad")
    if (good_c.commit, good_c.artifact) == (bad_c.commit, bad_c.artifact):
        raise ConfigError(
            f"--bad: {bad!r} is the same build as --good ({good_c.short}); "
            "localize compares two builds"
        )
    with hold(out_dir):
        doc = localize_builds(s, good_c, bad_c, out_dir, prompt=prompt, note=note)
        return write_localization(out_dir, doc, s.scrub)
