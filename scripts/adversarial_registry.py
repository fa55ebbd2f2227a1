"""Try to break `llm-bisect keep` with hostile registries, and print what happened.

    odd tags     a tags list naming `..`, `/`, `?`, `#`, overlong, unicode, control
                 characters: refused in one line, never a path; the mirror's release
                 image (v0.27.0) and every other tag untouched
    trickle      a byte every 20 s, in the headers or the body: over at --deadline
    pages        a tags list that always names a next page, or a page on another host
    digests      a layer, a config, a manifest that is not its digest: never pushed
    huge         a 50 MB tags list, a gzip bomb: a cap, not memory

Each case runs the shipped CLI (`python -m llm_bisect.cli keep`) as a subprocess against
a hostile registry on 127.0.0.1 (tests/hostileregistry.py), mirroring into a real one
(Debian's docker-registry, tests/localregistry.py). Upstream asks for a login (Basic),
given through DOCKER_CONFIG: a leak is that login in the output or the ledger, or any
request with an Authorization header reaching another host. A hang is a `keep` not
exited within its deadline + 30 s. Figures, not assertions (the tests assert).
Usage: python scripts/adversarial_registry.py
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from hostileregistry import (  # type: ignore[import-not-found]
    NIGHTLY_COMMIT,
    Hostile,
    HostileRegistry,
)
from localregistry import LocalRegistry, serving  # type: ignore[import-not-found]

CLI = [sys.executable, "-m", "llm_bisect.cli"]
LOGIN = ("ci-bot", "s3cret-registry-77")
DEADLINE_S = 3.0
"""--deadline of every case: a trickle of a byte every 20 s ends here."""
GOOD = f"nightly-{NIGHTLY_COMMIT[:12]}"
ODD_TAGS = [
    "nightly-2026-08-09/../v0.27.0",
    "nightly-2026-08-09/..",
    "..",
    "../v0.27.0",
    "nightly-a/b",
    "nightly-a?b=1",
    "nightly-a#b",
    "nightly-%2e%2e",
    "nightly-a%2Fv0.27.0",
    "nightly-" + "0" * 200,
    "nightly-ünï",
    "nightly-\u202ev0.27.0",
    "nightly-\x1b[31mred",
    "nightly-a\r\nX-Injected: 1",
    "nightly- a",
    "",
    "-nightly",
]


@dataclass
class Case:
    name: str
    hostile: Hostile
    args: list[str] = field(default_factory=list)
    expect_exit: int = 1
    inputs: int = 1
    """Hostile values the case holds (each odd tag is one, all through one `keep`)."""


@dataclass
class Tally:
    cases: int = 0
    one_line: int = 0
    tracebacks: int = 0
    hangs: int = 0
    leaks: int = 0
    overwritten: int = 0
    lines: list[str] = field(default_factory=list)


def cases() -> Iterator[Case]:
    odd = Hostile(tags=[*ODD_TAGS, GOOD])
    yield Case(f"{len(ODD_TAGS)} odd tags", odd, ["--pattern", "(?s).*"], inputs=len(ODD_TAGS))
    for where in ("headers", "body"):
        yield Case(f"trickle {where} (20 s a byte)", Hostile(trickle=where, trickle_s=20))
    layer = Hostile(trickle="body", trickle_s=20, trickle_layer_only=True)
    yield Case("trickle the layer copied", layer, ["--blob-deadline", "3"])
    yield Case("endless pages (default limit)", Hostile(endless=True))
    yield Case("endless pages (--max-pages 3)", Hostile(endless=True), ["--max-pages", "3"])
    for corrupt in ("layer", "config", "manifest"):
        yield Case(f"wrong digest: {corrupt}", Hostile(corrupt=corrupt))
    yield Case("50 MB tags list", Hostile(huge=50 << 20))
    yield Case("gzip bomb (256 MB)", Hostile(gzip_bomb=256 << 20))
    yield Case("a well-behaved upstream", Hostile(tags=[GOOD]), expect_exit=0)


@contextmanager
def elsewhere_page(case: Case) -> Iterator[HostileRegistry]:
    """Another host, named as the tags list's next page: any request to it with our
    Authorization would be a leak."""
    other = HostileRegistry(Hostile())
    with other.running():
        case.hostile.next_page = f"http://{other.host}/v2/x/tags/list?n=1"
        yield other


def run_case(case: Case, mirror: LocalRegistry, work: Path, tally: Tally, n: int) -> None:
    name = f"adversarial/vllm-{n}"
    release, _ = mirror.image(name, {"fault": "none"}, tag="v0.27.0")
    ledger = work / f"ledger-{n}.json"
    case.hostile.login = LOGIN
    with ExitStack() as stack:
        other = stack.enter_context(elsewhere_page(case)) if case.name == "page elsewhere" else None
        upstream = stack.enter_context(HostileRegistry(case.hostile).running())
        folder = work / f"docker-{n}"
        folder.mkdir()
        auth = base64.b64encode(":".join(LOGIN).encode()).decode()
        (folder / "config.json").write_text(json.dumps({"auths": {upstream.host: {"auth": auth}}}))
        env = {**os.environ, "DOCKER_CONFIG": str(folder)}
        args = [
            "keep",
            f"{upstream.host}/vllm/vllm-openai",
            "--mirror",
            f"{mirror.host}/{name}",
            "--ledger",
            str(ledger),
            "--deadline",
            str(DEADLINE_S),
            *case.args,
        ]
        began = time.monotonic()
        try:
            done = subprocess.run(
                [*CLI, *args], capture_output=True, text=True, env=env, timeout=DEADLINE_S + 30
            )
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            code, output = -9, "hang"
        took = time.monotonic() - began
    tally.cases += case.inputs
    tally.hangs += code == -9
    traceback = "Traceback" in output or code == 129
    tally.tracebacks += traceback
    errors = [line for line in output.splitlines() if line.startswith("llm-bisect: ")]
    if code == case.expect_exit == 1 and len(errors) == case.inputs and not traceback:
        tally.one_line += case.inputs  # each hostile value: one line of its own
    written = ledger.read_text() if ledger.exists() else ""
    tally.leaks += any(s in output + written for s in (LOGIN[1], auth))
    tally.leaks += bool(other is not None and other.authorized)
    # the mirror: the release as it was; no tag but the one well-formed nightly
    kept = mirror.manifest(name, "v0.27.0").headers.get("Docker-Content-Digest")
    listed = set(
        json.loads(httpx_get(f"http://{mirror.host}/v2/{name}/tags/list")).get("tags") or []
    )
    tally.overwritten += kept != release or bool(listed - {"v0.27.0", GOOD})
    said = [e.removeprefix("llm-bisect: ") for e in errors] or [output.strip()[-80:]]
    tally.lines.append(f"  {case.name[:40]:<32} exit {code:3d} in {took:5.1f}s  {said[0][:110]!a}")
    tally.lines += [f"  {'':<51}{line[:110]!a}" for line in said[1:]]


def httpx_get(url: str) -> str:
    import httpx

    return httpx.get(url).text


def main() -> None:
    tally = Tally()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llm-bisect-adversarial-registry-") as tmp:
        work = Path(tmp)
        with serving(work / "mirror") as mirror:
            all_cases = [*cases(), Case("page elsewhere", Hostile(tags=["a"]))]
            for n, case in enumerate(all_cases):
                run_case(case, mirror, work, tally, n)
    print(
        f"hostile registries: {tally.cases} cases through `keep` in {time.monotonic() - began:.0f}s"
    )
    for line in tally.lines:
        print(line)
    print(
        f"  cases: {tally.cases}  one-line errors: {tally.one_line}  tracebacks: "
        f"{tally.tracebacks}  hangs: {tally.hangs}  leaks: {tally.leaks}  "
        f"data overwritten: {tally.overwritten}"
    )


if __name__ == "__main__":
    main()
