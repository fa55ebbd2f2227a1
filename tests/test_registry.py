"""Image references, parsed the way the Docker engine does; registry credentials."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from hostileregistry import Hostile, HostileRegistry
from llm_bisect.launchers.docker_images import docker_logins
from llm_bisect.registry import DOCKER_HUB, ImageRef, RegistryClient, RegistryError, parse_image_ref
from llm_bisect.sim.docker import SimRegistry

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("vllm/vllm-openai:v0.27.0", ImageRef(DOCKER_HUB, "vllm/vllm-openai", "v0.27.0", None)),
        ("ubuntu", ImageRef(DOCKER_HUB, "library/ubuntu", "latest", None)),
        (
            "127.0.0.1:5000/ci/vllm:nightly-ab12",
            ImageRef("127.0.0.1:5000", "ci/vllm", "nightly-ab12", None),
        ),
        (f"ghcr.io/org/img@{DIGEST}", ImageRef("ghcr.io", "org/img", None, DIGEST)),
        ("localhost/vllm", ImageRef("localhost", "vllm", "latest", None)),
    ],
)
def test_references(ref: str, parsed: ImageRef) -> None:
    assert parse_image_ref(ref) == parsed


def test_pinned_names_as_the_engine_does() -> None:
    assert parse_image_ref("vllm/vllm-openai:v1").pinned(DIGEST) == f"vllm/vllm-openai@{DIGEST}"
    assert parse_image_ref("ubuntu").pinned(DIGEST) == f"ubuntu@{DIGEST}"
    assert parse_image_ref("r.io:1/a/b:t").pinned(DIGEST) == f"r.io:1/a/b@{DIGEST}"


@pytest.mark.parametrize("bad", ["Upper/Case:x", "x@sha256:short", ""])
def test_malformed_references_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_image_ref(bad)


# --- credentials: the config's, else what `docker login` stored ---------------------------


def docker_config_dir(tmp_path: Path, data: dict[str, Any]) -> Path:
    folder = tmp_path / "docker-config"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_docker_login_credentials_open_a_private_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = SimRegistry(token="t0k3n", login=("ci-bot", "s3cret-pass"))
    registry.add_image("org/img", "v1", {"fault": "none"})
    with registry.running():
        ref = parse_image_ref(f"{registry.host}/org/img:v1")
        anonymous = RegistryClient()
        with pytest.raises(RegistryError, match="refused an anonymous request; `docker login"):
            anonymous.manifest(ref)
        anonymous.close()
        auth = base64.b64encode(b"ci-bot:s3cret-pass").decode()
        monkeypatch.setenv(
            "DOCKER_CONFIG",
            str(docker_config_dir(tmp_path, {"auths": {registry.host: {"auth": auth}}})),
        )
        logins = docker_logins([registry.host, "other.example:5000"])
        assert logins == {registry.host: ("ci-bot", "s3cret-pass")}
        reg = RegistryClient(logins=logins)
        assert reg.manifest(ref) is not None
        reg.close()


def test_a_credential_helper_answers_for_its_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = SimRegistry(login=("helper-user", "helper-secret-1"))  # Basic, no token service
    registry.add_image("org/img", "v1", {"fault": "none"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-llmtest"
    helper.write_text(
        "#!/bin/sh\n"
        'read url\necho "{\\"ServerURL\\": \\"$url\\", \\"Username\\": \\"helper-user\\", '
        '\\"Secret\\": \\"helper-secret-1\\"}"\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with registry.running():
        monkeypatch.setenv(
            "DOCKER_CONFIG",
            str(docker_config_dir(tmp_path, {"credHelpers": {registry.host: "llmtest"}})),
        )
        logins = docker_logins([registry.host])
        assert logins == {registry.host: ("helper-user", "helper-secret-1")}
        reg = RegistryClient(logins=logins)
        ref = parse_image_ref(f"{registry.host}/org/img:v1")
        assert reg.manifest(ref) is not None
        reg.close()
        no_login = RegistryClient()
        with pytest.raises(RegistryError, match="asks for a login; `docker login"):
            no_login.manifest(ref)
        no_login.close()


def test_a_bearer_token_that_expired_is_asked_for_again_not_taken_for_a_missing_image() -> None:
    """Docker Hub's tokens last 300 s: a long run (or `keep`) outlives the first one, and
    the registry's 401 to it then said "no such image" (a skip for every later candidate)."""
    registry = SimRegistry(token="first-token")
    registry.add_image("org/img", "v1", {"fault": "none"})
    with registry.running():
        reg = RegistryClient()
        ref = parse_image_ref(f"{registry.host}/org/img:v1")
        assert reg.manifest(ref) is not None
        registry.token = "second-token"  # the first one expired
        assert reg.manifest(ref) is not None
        assert reg.tags(ref) == ["v1"]
        reg.close()
    assert sum(r.startswith("GET /token") for r in registry.requests) == 2


# --- what a hostile registry answers is data (tests/hostileregistry.py) --------------------


@pytest.mark.parametrize(
    ("hostile", "says"),
    [
        (
            Hostile(huge=10 << 20),
            "answered more than 8388608 bytes to GET '/v2/org/vllm/tags/list'",
        ),
        (Hostile(gzip_bomb=24 << 20), "answered more than 8388608 bytes"),  # 24 MB from 24 kB
    ],
)
def test_an_answer_is_read_up_to_its_cap_decoded_bytes_counted(hostile: Hostile, says: str) -> None:
    with HostileRegistry(hostile).running() as upstream:
        client = RegistryClient()
        try:
            with pytest.raises(RegistryError, match=re.escape(says)):
                client.tags(parse_image_ref(f"{upstream.host}/org/vllm"))
        finally:
            client.close()


@pytest.mark.parametrize(
    "reference", ["nightly-1/../v0.27.0", "a?b", "a#b", "..", "x" * 129, "sha256:../../x", "é"]
)
def test_a_reference_that_is_no_tag_or_digest_never_reaches_a_url(reference: str) -> None:
    with HostileRegistry(Hostile()).running() as upstream:
        client = RegistryClient()
        ref = parse_image_ref(f"{upstream.host}/org/vllm")
        try:
            with pytest.raises(RegistryError, match="not a tag or digest"):
                client.raw_manifest(ref, reference)
            with pytest.raises(RegistryError, match="not a tag or digest"):
                client.manifest_digest(ref, reference)
            with pytest.raises(RegistryError, match="not a digest"):
                client.has_blob(ref, reference)
        finally:
            client.close()
    assert upstream.requests == []


def test_a_tags_list_whose_next_page_is_on_another_host_is_not_followed() -> None:
    # our authorization goes with each page's request
    with HostileRegistry(Hostile(tags=["a"], next_page="http://127.0.0.2:9/v2/x")).running() as r:
        client = RegistryClient()
        try:
            with pytest.raises(RegistryError, match="the tags list's next page is elsewhere"):
                client.tags(parse_image_ref(f"{r.host}/org/vllm"))
        finally:
            client.close()
