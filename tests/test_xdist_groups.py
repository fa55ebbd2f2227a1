"""The suite's split over pytest-xdist workers (scripts/test: `-n 2 --dist loadgroup`):
the tests that reach a daemon there is one of run in one group, one after another, and a
module's fixture is made once; the rest spread (tests/conftest.py, xdist_groups)."""

from __future__ import annotations

import pytest

from conftest import Shape, shape_of, xdist_groups


def shape(name: str, module: str = "test_a", *, markers: tuple[str, ...] = (),
          fixtures: tuple[str, ...] = (), module_fixture: bool = False) -> Shape:  # fmt: skip
    return Shape(f"tests/{module}.py::{name}", module, frozenset(markers), frozenset(fixtures),
                 module_fixture)  # fmt: skip


def test_tests_of_the_docker_engine_run_in_one_group_with_their_modules_fixtures() -> None:
    tests = [
        shape("marked", markers=("docker",)),
        shape("engine", fixtures=("client", "tmp_path")),
        shape("built", module_fixture=True),  # its module reaches the engine: made there
        shape("pure", fixtures=("tmp_path",)),
        shape("queue", "test_b", markers=("slurm",)),
        shape("registry", "test_c", fixtures=("registries",)),
    ]
    grouped = {
        t.nodeid.split("::")[1]: g for t in tests if (g := xdist_groups(tests).get(t.nodeid))
    }
    assert grouped == {"marked": "daemons", "engine": "daemons", "built": "daemons",
                       "queue": "daemons", "registry": "daemons"}  # fmt: skip


def test_a_module_fixture_keeps_its_tests_on_one_worker_and_the_rest_spread() -> None:
    tests = [shape("built", module_fixture=True), shape("also", module_fixture=True),
             shape("pure"), shape("elsewhere", "test_b", module_fixture=True)]  # fmt: skip
    assert xdist_groups(tests) == {
        "tests/test_a.py::built": "test_a",
        "tests/test_a.py::also": "test_a",
        "tests/test_b.py::elsewhere": "test_b",
    }


def test_every_test_of_the_slurm_kubernetes_and_chromium_modules_is_in_the_group() -> None:
    modules = ("test_launchers_slurm", "test_launchers_kubernetes", "test_report_html")
    tests = [shape("any", module) for module in modules]
    assert set(xdist_groups(tests).values()) == {"daemons"} and len(xdist_groups(tests)) == 3


@pytest.fixture(scope="module")
def made_once() -> str:
    return "a module's fixture"


@pytest.mark.filterwarnings("default")
def test_a_collected_test_is_read_for_its_markers_and_module_fixtures(
    request: pytest.FixtureRequest, made_once: str
) -> None:
    seen = shape_of(request.node)
    assert seen.module == "test_xdist_groups" and seen.module_fixture
    assert "filterwarnings" in seen.markers and "made_once" in seen.fixtures
    assert not seen.shares_a_daemon


def test_a_test_without_a_module_fixture_is_read_so(request: pytest.FixtureRequest) -> None:
    assert not shape_of(request.node).module_fixture  # conftest's session fixtures aside
