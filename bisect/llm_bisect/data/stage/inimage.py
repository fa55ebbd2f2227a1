"""Run inside a base image by the image's own Python: apply a staged build to the package.

Not imported by llm-bisect: images.py sends this file's source as `python -c`, in a
container of the base image, after copying the stage into it; the container is then
committed as the derived image. Standard library only, Python 3.8 or newer.

    /llm-bisect-stage/manifest.json   {"kind": "overlay"|"wheel", "package": "vllm", ...}
    overlay: files/<repo path>        written over the installed package with their modes,
                                      symlinks as symlinks (stale .pyc removed);
             manifest "removed"       those files deleted (first)
    wheel:   <name>.whl               the installed package and its .dist-info removed, then
                                      the wheel unpacked where the package was

Prints one JSON line: where the package is, and what was done. Exit 1 with a message
when the image has no such package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import zipfile
from typing import Any

STAGE = sys.argv[1] if len(sys.argv) > 1 else "/llm-bisect-stage"


def _drop_pyc(path: str) -> None:
    cache = os.path.join(os.path.dirname(path), "__pycache__")
    stem = os.path.splitext(os.path.basename(path))[0] + "."
    if os.path.isdir(cache):
        for name in os.listdir(cache):
            if name.startswith(stem) and name.endswith(".pyc"):
                os.remove(os.path.join(cache, name))


def _clear(dest: str) -> None:
    if os.path.isdir(dest) and not os.path.islink(dest):
        shutil.rmtree(dest)
    elif os.path.lexists(dest):
        os.remove(dest)


def _overlay(site: str, manifest: dict[str, Any]) -> dict[str, Any]:
    removed = 0
    for rel in manifest.get("removed", []):  # first: a file may come where a folder was
        dest = os.path.join(site, rel)
        if os.path.lexists(dest):
            _clear(dest)
            removed += 1
        _drop_pyc(dest)
    files = os.path.join(STAGE, "files")
    written = 0
    for root, dirs, names in os.walk(files):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in names + links:
            source = os.path.join(root, name)
            dest = os.path.join(site, os.path.relpath(source, files))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            _clear(dest)
            if os.path.islink(source):
                os.symlink(os.readlink(source), dest)
            else:
                shutil.copy2(source, dest)  # with its mode
            _drop_pyc(dest)
            written += 1
    return {"written": written, "removed": removed}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheel(site: str, package_dir: str, manifest: dict[str, Any]) -> dict[str, Any]:
    wheel = os.path.join(STAGE, manifest["wheel"])
    dist = _normalized(manifest["wheel"].split("-", 1)[0])
    old = [
        name
        for name in os.listdir(site)
        if name.endswith(".dist-info") and _normalized(name.split("-", 1)[0]) == dist
    ]
    shutil.rmtree(package_dir)
    for name in old:
        shutil.rmtree(os.path.join(site, name))
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            parts = member.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue  # scripts, headers, data: the base image's own stay in place
                parts = parts[2:]
            if member.is_dir() or ".." in parts:
                continue
            dest = os.path.join(site, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with archive.open(member) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            mode = (member.external_attr >> 16) & 0o777
            if mode:
                os.chmod(dest, mode)
            count += 1
    return {"replaced": old, "unpacked": count}


def main() -> None:
    with open(os.path.join(STAGE, "manifest.json")) as f:
        manifest: dict[str, Any] = json.load(f)
    package = manifest["package"]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.submodule_search_locations:
        sys.exit(f"llm-bisect: the base image's Python has no package {package!r}")
    package_dir = os.path.dirname(spec.origin)
    site = os.path.dirname(package_dir)
    if manifest["kind"] == "overlay":
        done = _overlay(site, manifest)
    else:
        done = _wheel(site, package_dir, manifest)
    shutil.rmtree(STAGE)
    done["package_dir"] = package_dir
    done["python"] = sys.version.split()[0]
    print(json.dumps(done))


main()
