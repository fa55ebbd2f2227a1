"""A build backend (PEP 517) of the standard library alone: a wheel of toykinds.py, toyproc.py and
pyproject.toml's entry points, so that the package installs with no network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path
from typing import Any

import tomllib

HERE = Path(__file__).parent


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    project = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]
    name, version = project["name"].replace("-", "_"), project["version"]
    info = f"{name}-{version}.dist-info"
    points = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
        for group, entries in project["entry-points"].items()
    )
    files = {
        "toykinds.py": (HERE / "toykinds.py").read_bytes(),
        "toyproc.py": (HERE / "toyproc.py").read_bytes(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {version}\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: backend\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{info}/entry_points.txt": points.encode(),
    }
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        record = [_record(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel
