"""`llm-bisect keep` against two real registries (Debian's docker-registry on loopback): the
ledger, the byte-for-byte mirror of multi-arch images, a second run that copies nothing,
retention played by deleting tags upstream, and a bisection that then runs from the mirror."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from typer.testing import CliRunner

from helpers import History, write_config
from hostileregistry import NIGHTLY_COMMIT, Hostile, HostileRegistry
from llm_bisect.cli import cli
from llm_bisect.registry import RegistryClient, parse_image_ref
from llm_bisect.sim.docker import SimRegistry, sim_server
from localregistry import OCI_MANIFEST, LocalRegistry

SHA = "0123456789abcdef0123456789abcdef01234567"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def repo() -> str:
    return f"vllm/vllm-openai-{uuid.uuid4().hex[:8]}"


def test_keep_records_each_tag_and_copies_a_two_platform_index_byte_for_byte(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    upstream, mirror = registries
    name = repo()
    index = upstream.multi_arch(name, f"nightly-{SHA}", {"fault": "none"})
    upstream.multi_arch(name, "v0.27.0", {"fault": "none"})  # no match: not kept
    before = upstream.manifest(name, index).content
    ledger = tmp_path / "ledger.json"
    code, output = invoke(
        "keep",
        f"{upstream.host}/{name}",
        "--mirror",
        f"{mirror.host}/{name}",
        "--ledger",
        str(ledger),
    )
    assert code == 0, output
    assert "1 tag(s)" in output and "1 new" in output
    # two configs and the layer the platforms share; two platforms and their index
    assert "1 image(s) copied" in output and "3 blob(s) streamed" in output
    assert "0 mounted, 1 already there, 3 manifest(s) written" in output
    kept = json.loads(ledger.read_text())
    assert kept["source"] == f"{upstream.host}/{name}"
    entry = kept["entries"][f"nightly-{SHA}"]
    assert entry["digest"] == index and entry["commit"] == SHA
    assert entry["platforms"] == ["linux/amd64", "linux/arm64"]
    assert entry["mirror"] == f"{mirror.host}/{name}" and entry["gone"] is None
    # the mirror: the same index bytes, under the tag and its digest; each platform whole
    copy = mirror.manifest(name, f"nightly-{SHA}")
    assert copy.content == before and copy.headers["Docker-Content-Digest"] == index
    for child in json.loads(before)["manifests"]:
        platform = mirror.manifest(name, child["digest"])
        assert platform.content == upstream.manifest(name, child["digest"]).content
        body = platform.json()
        for blob in [body["config"], *body["layers"]]:
            assert mirror.has_blob(name, blob["digest"])
    assert mirror.manifest(name, "v0.27.0").status_code == 404

    before = upstream.served(name)
    code, output = invoke(
        "keep",
        f"{upstream.host}/{name}",
        "--mirror",
        f"{mirror.host}/{name}",
        "--ledger",
        str(ledger),
    )
    assert code == 0, output
    asked = upstream.served(name)[len(before) :]
    # the tags list and a HEAD per tag: nothing downloaded (Docker Hub counts a GET as a pull)
    assert [a.split(" ")[0] for a in asked if "/tags/list" not in a] == ["HEAD"], asked
    assert "0 new" in output
    assert "0 image(s) copied, 1 already there; 0 blob(s) streamed" in output
    assert "0 manifest(s) written" in output
    assert (
        json.loads(ledger.read_text())["entries"][f"nightly-{SHA}"]["first_seen"]
        == (entry["first_seen"])
    )


def test_a_copy_within_one_registry_mounts_blobs_instead_of_moving_them(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    upstream, _ = registries
    name = repo()
    upstream.multi_arch(name, f"nightly-{SHA[:12]}", {"fault": "none"})
    code, output = invoke(
        "keep",
        f"{upstream.host}/{name}",
        "--mirror",
        f"{upstream.host}/{name}-kept",
        "--ledger",
        str(tmp_path / "l.json"),
    )
    assert code == 0, output
    assert "0 blob(s) streamed (0.00 GB), 3 mounted, 1 already there" in output
    assert upstream.manifest(f"{name}-kept", f"nightly-{SHA[:12]}").status_code == 200


def test_dropped_tags_stay_in_the_ledger_marked_gone_and_a_moved_tag_is_new(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    upstream, _ = registries
    name = repo()
    ledger = tmp_path / "ledger.json"
    for i in range(3):
        upstream.multi_arch(name, f"nightly-{i}abcdef{i}", {"fault": "none", "n": i})
    code, output = invoke(
        "keep", f"{upstream.host}/{name}", "--ledger", str(ledger), "--pattern", r"nightly-\w+"
    )
    assert code == 0 and "3 tag(s)" in output and "3 new" in output, output
    upstream.drop(name, "nightly-0abcdef0")
    moved = upstream.multi_arch(name, "nightly-1abcdef1", {"fault": "null-content"})
    code, output = invoke(
        "keep", f"{upstream.host}/{name}", "--ledger", str(ledger), "--pattern", r"nightly-\w+"
    )
    assert code == 0 and "1 new, 1 dropped upstream" in output, output
    entries = json.loads(ledger.read_text())["entries"]
    assert entries["nightly-0abcdef0"]["gone"] is not None
    assert entries["nightly-0abcdef0"]["commit"] == "0abcdef0"
    assert entries["nightly-1abcdef1"]["digest"] == moved
    code, output = invoke(
        "keep", f"{upstream.host}/{name}", "--ledger", str(ledger), "--pattern", r"nightly-\w+"
    )
    assert "0 new, 0 dropped upstream" in output, output


def test_every_tag_is_listed_and_one_tag_names_one_image(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    # distribution 2.8 answers the whole list in one page, in no order (`n` is ignored)
    upstream, mirror = registries
    name = repo()
    digest, _ = upstream.image(name, {"fault": "none"}, labels={"vllm.commit": SHA})
    body = upstream.manifest(name, digest)
    for i in range(5):
        upstream.put_manifest(name, f"nightly-{i}{SHA[1:8]}", body.content, OCI_MANIFEST)
    ledger = tmp_path / "l.json"
    code, output = invoke(
        "keep",
        f"{upstream.host}/{name}",
        "--mirror",
        f"{mirror.host}/{name}",
        "--ledger",
        str(ledger),
    )
    assert code == 0 and "5 tag(s)" in output, output
    # one image under five tags: copied once, then only tagged
    assert "5 image(s) copied" in output and "1 manifest(s) written" in output, output
    entries = json.loads(ledger.read_text())["entries"]
    assert sorted(entries) == [f"nightly-{i}{SHA[1:8]}" for i in range(5)]
    assert {e["commit"] for e in entries.values()} == {SHA}  # the label wins over the tag
    assert {tuple(e["platforms"]) for e in entries.values()} == {("linux/amd64",)}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["Not A Repo!"], "SOURCE: not a REGISTRY/REPO 'Not A Repo!'"),
        (["127.0.0.1:1/vllm:nightly"], "SOURCE: name a repository without a tag or digest"),
        (["127.0.0.1:1/vllm", "--pattern", "nightly-("], "--pattern: not a regular expression"),
        (["127.0.0.1:1/vllm", "--mirror", "127.0.0.1:1/vllm"], "--mirror: '127.0.0.1:1/vllm' is"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_written(
    args: list[str], says: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "l.json"
    code, output = invoke("keep", *args, "--ledger", str(ledger))
    assert code == 2 and says in output, output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert not ledger.exists()


def test_a_registry_that_cannot_be_reached_is_one_line(tmp_path: Path) -> None:
    code, output = invoke("keep", "127.0.0.1:1/vllm", "--ledger", str(tmp_path / "l.json"))
    assert code == 1 and "127.0.0.1:1: ConnectError" in output, output
    assert "Traceback" not in output


@pytest.mark.docker
def test_a_bisection_runs_from_the_mirror_after_upstream_dropped_every_tag(
    registries: tuple[LocalRegistry, LocalRegistry],
    client: docker.DockerClient,
    history: Any,
) -> None:
    upstream, mirror = registries
    h: History = history({5: "garbled-math"}, n=8)
    name = repo()
    indexes = {}
    for i, sha in enumerate(h.shas):
        fault = "garbled-math" if i >= 5 else "none"
        labels = {"ai.vllm.build.commit": sha}
        indexes[sha] = upstream.multi_arch(name, f"nightly-{sha}", {"fault": fault}, labels)
    ledger = h.root / "ledger.json"
    code, output = invoke(
        "keep",
        f"{upstream.host}/{name}",
        "--mirror",
        f"{mirror.host}/{name}",
        "--ledger",
        str(ledger),
    )
    assert code == 0 and f"{len(h.shas)} image(s) copied" in output, output
    for sha in h.shas:
        upstream.drop(name, f"nightly-{sha}")  # retention
    server = sim_server(f"{upstream.host}/{name}:nightly-{{commit}}")
    plain = write_config(
        h.root / "plain.yaml",
        {
            "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1]},
            "server": server,
        },
    )
    code, output = invoke("candidates", str(plain))
    assert output.count("MISSING") == len(h.shas), output  # upstream holds none of them now
    ends = {  # as a config a month later names them: tags upstream no longer has
        "good": f"{upstream.host}/{name}:nightly-{h.shas[0]}",
        "bad": f"{upstream.host}/{name}:nightly-{h.shas[-1]}",
    }
    kept = write_config(
        h.root / "kept.yaml",
        {
            "candidates": {"repo": str(h.repo), **ends},
            "server": {**server, "ledger": "ledger.json"},
        },
    )
    out = h.root / "out"
    try:
        code, output = invoke("candidates", str(kept))
        assert code == 0 and "MISSING" not in output, output
        code, output = invoke("run", str(kept), "--out", str(out))
        assert code == 0, output
        result = json.loads((out / "result.json").read_text())
        assert result["culprit"]["commit"] == h.shas[5]
        assert result["good"] == h.shas[0] and result["bad"] == h.shas[-1]
        ran = [p for p in result["probes"] if p["verdict"] in ("good", "bad")]
        assert ran
        for p in ran:
            image = p["fingerprint"]["image"]
            assert image["ref"] == f"{mirror.host}/{name}@{indexes[p['commit']]}"
    finally:
        for image in client.images.list(name=f"{mirror.host}/{name}"):
            client.images.remove(str(image.id), force=True)


def test_a_private_registrys_login_opens_it_and_never_reaches_output_or_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = SimRegistry(token="t0k3n-keep", login=("ci-bot", "s3cret-keep-42"))
    for i in range(3):
        registry.add_image("org/vllm", f"nightly-{i}{SHA[1:]}", {"fault": "none"})
    registry.add_image("org/vllm", "latest", {"fault": "none"})
    ledger = tmp_path / "ledger.json"
    folder = tmp_path / "docker-config"
    folder.mkdir()
    auth = base64.b64encode(b"ci-bot:s3cret-keep-42").decode()
    with registry.running():
        source = f"{registry.host}/org/vllm"
        code, output = invoke("keep", source, "--ledger", str(ledger))
        assert code == 1 and "the token service refused an anonymous request" in output, output
        assert f"docker login {registry.host}" in output and "Traceback" not in output
        (folder / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(folder))
        code, output = invoke("keep", source, "--ledger", str(ledger))
        assert code == 0 and "3 tag(s)" in output and "3 new" in output, output
    written = ledger.read_text()
    for secret in ("s3cret-keep-42", auth, "t0k3n-keep"):
        assert secret not in output and secret not in written
    assert sorted(json.loads(written)["entries"]) == [f"nightly-{i}{SHA[1:]}" for i in range(3)]


def test_the_tags_list_is_read_across_its_pages() -> None:
    registry = SimRegistry()
    for i in range(5):
        registry.add_image("org/vllm", f"t{i}", {"fault": "none"})
    with registry.running():
        client = RegistryClient()
        try:
            tags = client.tags(parse_image_ref(f"{registry.host}/org/vllm"), page=2)
        finally:
            client.close()
    assert tags == [f"t{i}" for i in range(5)]
    assert sum("/tags/list" in r for r in registry.requests) == 3


def test_a_keep_stopped_halfway_resumes_with_what_the_mirror_already_has(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    upstream, mirror = registries
    name = repo()
    index = upstream.multi_arch(name, f"nightly-{SHA}", {"fault": "none"})
    # what a killed keep left: the amd64 image's blobs and manifest, nothing else
    amd64 = json.loads(upstream.manifest(name, index).content)["manifests"][0]["digest"]
    body = upstream.manifest(name, amd64)
    for blob in [body.json()["config"], *body.json()["layers"]]:
        data = httpx.get(upstream.url(name, f"/blobs/{blob['digest']}")).content
        mirror.put_blob(name, data)
    mirror.put_manifest(name, amd64, body.content, OCI_MANIFEST)
    code, output = invoke(
        "keep",
        f"{upstream.host}/{name}",
        "--mirror",
        f"{mirror.host}/{name}",
        "--ledger",
        str(tmp_path / "l.json"),
    )
    assert code == 0, output
    # the arm64 config, then the arm64 manifest and the index: the rest is not copied again
    assert "1 blob(s) streamed" in output and "1 already there, 2 manifest(s) written" in output
    assert mirror.manifest(name, f"nightly-{SHA}").headers["Docker-Content-Digest"] == index


def test_a_tag_that_would_name_another_path_is_refused_and_the_mirrors_release_stays(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    # an upstream whose tags list names `nightly-…/../v0.27.0`: put into a URL unescaped,
    # httpx resolves the `..` and the mirror's release image is replaced by the nightly
    _, mirror = registries
    name = repo()
    release, _ = mirror.image(name, {"fault": "none"}, tag="v0.27.0")
    odd = [
        "nightly-2026-08-09/../v0.27.0",
        "nightly-2026-08-09?x=1",
        "nightly-2026-08-09#frag",
        "nightly-" + "0" * 130,
        "nightly-ünï",
        "nightly-2026-08-09/..",
    ]
    good = f"nightly-{NIGHTLY_COMMIT[:12]}"
    ledger = tmp_path / "l.json"
    with HostileRegistry(Hostile(tags=[*odd, good])).running() as upstream:
        code, output = invoke(
            "keep",
            f"{upstream.host}/vllm/vllm-openai",
            "--mirror",
            f"{mirror.host}/{name}",
            "--pattern",
            "nightly-.*",
            "--ledger",
            str(ledger),
        )
    assert code == 1, output  # a tag not kept: exit 1, the others kept
    assert mirror.manifest(name, "v0.27.0").headers["Docker-Content-Digest"] == release
    assert mirror.manifest(name, "nightly-2026-08-09").status_code == 404  # not cut short
    assert mirror.manifest(name, good).status_code == 200
    refused = [line for line in output.splitlines() if "not a tag" in line]
    assert len(refused) == len(odd), output
    assert all(len(line) < 240 for line in refused), output
    assert "Traceback" not in output
    assert sorted(json.loads(ledger.read_text())["entries"]) == [good]


@pytest.mark.parametrize(
    ("corrupt", "says"),
    [
        ("layer", "came as 1280 bytes of sha256:"),
        ("config", "config blob sha256:"),
        ("manifest", "came back as sha256:"),
    ],
)
def test_bytes_that_are_not_their_digest_are_never_pushed_and_the_tag_is_not_kept(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path, corrupt: str, says: str
) -> None:
    _, mirror = registries
    name = repo()
    tag = f"nightly-{NIGHTLY_COMMIT}"
    with HostileRegistry(Hostile(corrupt=corrupt)).running() as upstream:
        code, output = invoke(
            "keep",
            f"{upstream.host}/vllm/vllm-openai",
            "--mirror",
            f"{mirror.host}/{name}",
            "--ledger",
            str(tmp_path / "l.json"),
        )
        layer = upstream.layer
    assert code == 1 and says in output, output
    assert "refused" not in output  # found here, not left to the mirror to refuse
    assert mirror.manifest(name, tag).status_code == 404
    assert not mirror.has_blob(name, layer) or corrupt != "layer"
    assert "Traceback" not in output


@pytest.mark.parametrize("trickle", ["headers", "body"])
def test_a_registry_that_trickles_its_answers_ends_at_the_deadline(
    tmp_path: Path, trickle: str
) -> None:
    # a byte every 0.2 s: never a read timeout, and never a whole answer
    hostile = HostileRegistry(Hostile(trickle=trickle, trickle_s=0.2))
    with hostile.running() as upstream:
        began = time.monotonic()
        code, output = invoke(
            "keep",
            f"{upstream.host}/vllm/vllm-openai",
            "--deadline",
            "1",
            "--ledger",
            str(tmp_path / "l.json"),
        )
        took = time.monotonic() - began
    assert code == 1, output
    assert f"{upstream.host}: no whole answer within 1 s" in output, output
    assert len(output.strip().splitlines()) == 1 and took < 3, (took, output)


def test_a_layer_trickled_to_the_mirror_ends_at_the_blob_deadline(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    _, mirror = registries
    name = repo()
    hostile = Hostile(trickle="body", trickle_s=0.2, trickle_layer_only=True)
    with HostileRegistry(hostile).running() as upstream:
        began = time.monotonic()
        code, output = invoke(
            "keep",
            f"{upstream.host}/vllm/vllm-openai",
            "--mirror",
            f"{mirror.host}/{name}",
            "--blob-deadline",
            "1",
            "--ledger",
            str(tmp_path / "l.json"),
        )
        took = time.monotonic() - began
    assert code == 1 and "no whole answer within 1 s" in output, output
    assert took < 3, took
    assert mirror.manifest(name, f"nightly-{NIGHTLY_COMMIT}").status_code == 404


def test_a_tags_list_that_always_names_a_next_page_ends_at_the_page_limit(
    tmp_path: Path,
) -> None:
    hostile = HostileRegistry(Hostile(endless=True))
    with hostile.running() as upstream:
        code, output = invoke(
            "keep",
            f"{upstream.host}/vllm/vllm-openai",
            "--max-pages",
            "5",
            "--ledger",
            str(tmp_path / "l.json"),
        )
    assert code == 1 and "names a next page after 5 pages" in output, output
    assert len(output.strip().splitlines()) == 1
    assert sum("/tags/list" in r for r in hostile.requests) == 5


def test_the_deadlines_and_page_limit_are_stated_and_settable() -> None:
    code, output = invoke("keep", "--help")
    assert code == 0
    for option in ("--deadline", "--blob-deadline", "--max-pages"):
        assert option in output
    code, output = invoke("keep", "127.0.0.1:1/vllm", "--deadline", "0")
    assert code == 2 and "--deadline: give a number of seconds above 0" in output, output
