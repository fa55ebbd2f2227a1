"""Images derived from builds (Docker launcher), against a real Docker engine.

The base image holds the toy engine's base commit at /opt/engine (toybuild.py), made
here with `docker import`; its Python is this machine's, bind-mounted as the server's
is. Wheel and overlay builds become `llm-bisect-build:<commit>-<route>` images.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import yaml
from typer.testing import CliRunner

from helpers import write_config
from llm_bisect.builds import Build, ImageTarget
from llm_bisect.builds.images import BASE_LABEL, ROUTE_LABEL, ImageDeriver, derived_ref
from llm_bisect.cli import cli
from llm_bisect.launchers.docker import volume_binds
from llm_bisect.launchers.docker_engine import RUN_LABEL
from llm_bisect.model import Candidate
from llm_bisect.sim.docker import PYTHON, layer_tar, sim_server


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def import_base(
    client: docker.DockerClient, ref: str, files: dict[str, bytes], *changes: str
) -> str:
    """`docker import` of `files` with PYTHONPATH=/opt/engine; the image id."""
    repo, tag = ref.rsplit(":", 1)
    out = client.api.import_image_from_data(
        layer_tar(files),
        repository=repo,
        tag=tag,
        changes=["ENV PYTHONPATH=/opt/engine", *changes],
    )
    return str(json.loads(out.strip().splitlines()[-1])["status"])


def toy_files(toy: dict[str, Any]) -> dict[str, bytes]:
    """The toy engine of one commit, installed at /opt/engine with its compiled part."""
    site = toy["site"]
    files = {
        f"opt/engine/toyengine/{p.name}": p.read_bytes()
        for p in sorted((site / "toyengine").iterdir())
        if p.is_file()
    }
    assert "opt/engine/toyengine/_native.bin" in files
    return files


@pytest.fixture(scope="module")
def base(client: docker.DockerClient, toy: dict[str, Any]) -> Iterator[dict[str, str]]:
    """A base image of the toy engine's base commit, and the same tagged as that commit's
    published image; every image the tests derive from it is removed afterwards."""
    repo = f"llm-bisect-test-{uuid.uuid4().hex[:8]}"
    files = toy_files(toy)
    import_base(client, f"{repo}:base", files, f"LABEL ai.vllm.build.commit={toy['shas']['base']}")
    client.images.get(f"{repo}:base").tag(repo, toy["shas"]["base"])
    yield {"repo": repo, "ref": f"{repo}:base"}
    shas = set(toy["shas"].values())
    for image in client.images.list(filters={"label": ROUTE_LABEL}):
        labels = (image.attrs.get("Config") or {}).get("Labels") or {}
        if labels.get("llm-bisect.commit") in shas:
            for tag in image.tags:
                client.images.remove(tag, force=True)
    for image in client.images.list(name=repo):
        for tag in image.tags:
            client.images.remove(tag, force=True)


def docker_config(
    toy: dict[str, Any], tmp: Path, strategies: list[dict[str, Any]], base_repo: str
) -> Path:
    server = sim_server(
        f"{base_repo}:{{commit}}",
        entrypoint=[PYTHON, "-m", "toyengine.serve"],
        args=["--commit", "{commit}", "--port", "{port}", "--host", "0.0.0.0"],
        env={"PYTHONPATH": "/opt/engine:/src", "PYTHONDONTWRITEBYTECODE": "1"},
        pull="never",  # the images are this engine's: no registry is asked
    )
    data = {
        "candidates": {
            "repo": str(toy["repo"]),
            "good": toy["shas"]["base"],
            "bad": toy["shas"]["fixed"],
        },
        "server": server,
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "build": {"strategies": strategies, "cache": {"dir": str(tmp / "cache")}},
    }
    return write_config(tmp / "docker.yaml", data)


def mixed(toy: dict[str, Any], index: dict[str, Any], base_ref: str) -> list[dict[str, Any]]:
    """image, then wheel (an index that kept few), then overlay: every route in one range."""
    return [
        {"type": "image"},
        {
            "type": "wheel",
            "index": index["url"] + "/sparse/{commit}/",
            "package": "toyengine",
            "image": base_ref,
            "python": PYTHON,
        },
        {"type": "overlay", "image": base_ref, "python": PYTHON, "package": "toyengine"},
    ]  # fmt: skip  (overlay: the base commit is the one the base image's label names)


def run_in(client: docker.DockerClient, image: str, code: str) -> str:
    volumes = sim_server("x")["volumes"]
    out = client.containers.run(
        image, entrypoint=[PYTHON, "-c", code], volumes=volumes, remove=True, network_disabled=True
    )
    return bytes(out).decode().strip()


@pytest.mark.docker
def test_candidates_shows_image_wheel_overlay_and_no_build_routes(
    client: docker.DockerClient,
    toy: dict[str, Any],
    index: dict[str, Any],
    base: dict[str, str],
    tmp_path: Path,
) -> None:
    cfg = docker_config(toy, tmp_path, mixed(toy, index, base["ref"]), base["repo"])
    code, output = invoke("candidates", str(cfg))
    assert code == 0, output
    shas = toy["shas"]
    rows = {line.split()[1]: line for line in output.splitlines() if line[:4].strip().isdigit()}
    assert "[overlay: 0 Python files over" in rows[shas["doc"][:12]], output
    assert "[wheel: toyengine-0.1.0+g" in rows[shas["fault"][:12]], output
    kernel = rows[shas["kernel"][:12]]
    assert "no build: image: no artifact" in kernel and "wheel: no wheel" in kernel, output
    assert "overlay: csrc/kernel.cu changed since" in kernel, output
    print(f"\n{output}")
    derived = client.images.list(filters={"label": ROUTE_LABEL})
    made = [i for i in derived if i.labels.get("llm-bisect.commit") in shas.values()]
    assert not made, "a dry run makes nothing"


@pytest.mark.docker
def test_a_bisection_over_derived_images_finds_the_culprit(
    client: docker.DockerClient,
    toy: dict[str, Any],
    index: dict[str, Any],
    base: dict[str, str],
    tmp_path: Path,
) -> None:
    shas = toy["shas"]
    cfg = docker_config(toy, tmp_path, mixed(toy, index, base["ref"]), base["repo"])
    out = tmp_path / "out"
    code, output = invoke("run", str(cfg), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == shas["fault"], output
    routes = {}
    for probe in result["probes"]:
        build = probe["fingerprint"].get("build")
        if build is None:  # the good end runs its published image
            assert probe["fingerprint"]["image"]["ref"] == f"{base['repo']}:{shas['base']}"
            continue
        routes[probe["commit"]] = build["route"]
        assert build["image"] == derived_ref(Candidate(probe["commit"]), build["route"])
        assert build["base_image"] == base["ref"]
        labels = client.images.get(build["image"]).labels
        assert labels["llm-bisect.commit"] == probe["commit"]
        assert labels[BASE_LABEL] == client.images.get(base["ref"]).id
        assert (out / "probes" / probe["commit"][:12] / "build.log").exists()
    assert routes[shas["fault"]] == "wheel" and routes[shas["fixed"]] == "wheel", routes
    assert "overlay" in routes.values(), routes
    # the wheel's own package replaced the base's inside the image
    version = run_in(
        client,
        derived_ref(Candidate(shas["fault"]), "wheel"),
        "import importlib.metadata as m, toyengine.settings as s; "
        "print(m.version('toyengine'), s.FAULT)",
    )
    assert version == f"0.1.0+g{shas['fault'][:12]} degenerate-content"
    left = client.containers.list(all=True, filters={"label": RUN_LABEL})
    assert not [c for c in left if c.labels.get("llm-bisect.commit") in shas.values()]
    # a second run finds every derived image made: nothing is built again
    again = tmp_path / "again"
    code, output = invoke("run", str(cfg), "--out", str(again))
    assert code == 0, output
    result = json.loads((again / "result.json").read_text())
    builds = [p["fingerprint"]["build"] for p in result["probes"] if "build" in p["fingerprint"]]
    assert builds and all(b["cached"] for b in builds), builds


@pytest.mark.docker
def test_an_overlay_on_nearest_is_derived_from_its_base_commits_wheel_image(
    client: docker.DockerClient,
    toy: dict[str, Any],
    index: dict[str, Any],
    base: dict[str, str],
    tmp_path: Path,
) -> None:
    """The Kimi shape on Docker: a commit without a wheel of its own is its Python over the
    image derived from its nearest ancestor's wheel."""
    shas = toy["shas"]
    strategies = [
        {"type": "wheel", "index": index["url"] + "/sparse/{commit}/", "package": "toyengine",
         "image": base["ref"], "python": PYTHON},
        {"type": "overlay", "base": "nearest", "python": PYTHON, "package": "toyengine"},
    ]  # fmt: skip
    cfg = docker_config(toy, tmp_path, strategies, base["repo"])
    code, output = invoke("candidates", str(cfg))
    assert code == 0, output
    rows = {line.split()[1]: line for line in output.splitlines() if line[:4].strip().isdigit()}
    over_base = f"over {shas['base'][:12]} (nearest: wheel)"
    assert f"[overlay: 1 Python files {over_base}]" in rows[shas["refactor"][:12]], output
    assert "csrc/kernel.cu changed since" in rows[shas["broken"][:12]], output
    out = tmp_path / "one"
    code, output = invoke("check", str(cfg), "--candidate", shas["refactor"], "--out", str(out))
    assert code == 0, output
    build = json.loads((out / "probe.json").read_text())["fingerprint"]["build"]
    assert build["route"] == "overlay" and build["base_commit"] == shas["base"], build
    assert build["base_route"] == "wheel", build
    assert build["base_image"] == derived_ref(Candidate(shas["base"]), "wheel"), build
    labels = client.images.get(build["image"]).labels
    assert labels[BASE_LABEL] == client.images.get(build["base_image"]).id


def stage(tmp: Path, name: str, files: dict[str, bytes], removed: list[str]) -> Build:
    folder = tmp / name
    for path, data in files.items():
        (folder / "files" / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / "files" / path).write_bytes(data)
    facts = {"route": "overlay", "removed_paths": removed, "written": len(files)}
    return Build("overlay", folder, "", {}, facts)


@pytest.mark.docker
def test_a_derived_image_keeps_its_base_config_and_the_budget_evicts_the_oldest(
    client: docker.DockerClient, toy: dict[str, Any], tmp_path: Path
) -> None:
    repo = f"llm-bisect-test-{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    try:
        files = toy_files(toy)
        files["opt/engine/toyengine/old.py"] = b"GONE = False\n"
        import_base(client, f"{repo}:base", files)
        base_image = client.images.get(f"{repo}:base")
        deriver = ImageDeriver(
            client,
            volumes=volume_binds(sim_server("x")["volumes"], tmp_path),
            labels={RUN_LABEL: f"test-{repo}"},
            cache=str(tmp_path / "cache"),
        )
        target = ImageTarget(f"{repo}:base", PYTHON, "toyengine")
        log = tmp_path / "build.log"
        one, two = (Candidate(uuid.uuid4().hex + uuid.uuid4().hex[:8]) for _ in "12")
        build = stage(
            tmp_path,
            "one",
            {"toyengine/settings.py": b'FAULT = "numerics"\n', "toyengine/new.py": b"X = 1\n"},
            ["toyengine/old.py"],
        )
        image = deriver.derive(one, build, target, base_image, log, key="key-one")
        made.append(derived_ref(one, "overlay"))
        listing = run_in(
            client,
            str(image.id),
            "import os, toyengine.settings as s; "
            "print(sorted(os.listdir('/opt/engine/toyengine')), s.FAULT)",
        )
        assert "'new.py'" in listing and "'old.py'" not in listing, listing
        assert listing.endswith("numerics"), listing
        config = image.attrs["Config"]
        assert "PYTHONPATH=/opt/engine" in config["Env"]
        assert config["Cmd"] == [PYTHON] and not config["Entrypoint"], config
        assert config["Labels"][BASE_LABEL] == base_image.id
        assert '"written": 2' in log.read_text()
        assert not client.containers.list(all=True, filters={"label": f"{RUN_LABEL}=test-{repo}"})
        assert deriver.find(made[0], str(base_image.id), "key-one") is not None
        assert deriver.find(made[0], "sha256:another-base", "key-one") is None
        assert deriver.find(made[0], str(base_image.id), "key-two") is None, "another config's"
        # a staged file that cannot be written fails the build, and says why
        bad = stage(tmp_path, "bad", {"toyengine/settings.py/x.py": b""}, [])
        with pytest.raises(Exception, match="exited with 1"):
            deriver.derive(two, bad, target, base_image, log)
        assert not client.containers.list(all=True, filters={"label": f"{RUN_LABEL}=test-{repo}"})
        deriver.derive(two, stage(tmp_path, "two", {}, []), target, base_image, log)
        made.append(derived_ref(two, "overlay"))
        gone = deriver.sweep(1, keep=made[1])
        assert made[0] in gone and made[1] not in gone
        assert client.images.get(made[1])
        # a base with an entrypoint (as vLLM's images have) keeps it, and gets no command
        import_base(client, f"{repo}:serve", files, f'ENTRYPOINT ["{PYTHON}", "-m", "x"]')
        serve = client.images.get(f"{repo}:serve")
        image = deriver.derive(
            one, stage(tmp_path, "three", {}, []), target, serve, log
        )  # the same commit from another base: made again, the old one not left dangling
        assert image.attrs["Config"]["Entrypoint"] == [PYTHON, "-m", "x"]
        assert not image.attrs["Config"]["Cmd"]
        dangling = client.images.list(filters={"dangling": True, "label": f"{BASE_LABEL}"})
        assert not [i for i in dangling if i.labels.get("llm-bisect.commit") == one.commit]
    finally:
        for ref in [*made, f"{repo}:base", f"{repo}:serve"]:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(ref, force=True)


@pytest.mark.parametrize(
    ("strategy", "launcher", "message"),
    [
        ({"type": "command", "run": ["x"]}, "docker",
         "build.strategies.0: command builds run with launcher: process"),
        ({"type": "overlay", "venv": "v", "base_commit": "HEAD"}, "docker",
         "with launcher: docker a overlay build needs image:"),
        ({"type": "wheel", "index": "http://x/{commit}/", "image": "b:1"}, "process",
         "build.strategies.0: image: is for launcher: docker"),
        ({"type": "overlay", "image": "b:1", "venv": "v", "base_commit": "HEAD"}, "docker",
         "overlay takes one of venv (launcher: process) or image (docker)"),
    ],
)  # fmt: skip
def test_a_build_that_does_not_fit_the_launcher_is_one_line(
    toy: dict[str, Any], tmp_path: Path, strategy: dict[str, Any], launcher: str, message: str
) -> None:
    server: dict[str, Any] = (
        {"launcher": "docker", "image": "x:{commit}"}
        if launcher == "docker"
        else {"command": ["true", "{port}"]}
    )
    data = {
        "candidates": {"repo": str(toy["repo"]), "good": "HEAD~1", "bad": "HEAD"},
        "server": server,
        "build": {"strategies": [strategy]},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    code, output = invoke("candidates", str(path))
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], output
