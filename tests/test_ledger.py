"""The keep ledger: what a look at the tags changes, which image a commit runs, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_bisect.errors import ConfigError
from llm_bisect.ledger import Entry, Ledger, default_path, load, observe, save

SHA = "0123456789abcdef0123456789abcdef01234567"
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def test_a_tag_seen_again_keeps_its_first_sighting_and_its_mirror() -> None:
    first = observe(Ledger("r/x"), {"nightly-a": Entry(D1, SHA)}, "day1")
    assert first.entries["nightly-a"].first_seen == "day1"
    mirrored = Ledger("r/x", {"nightly-a": Entry(D1, SHA, first_seen="day1", mirror="m/x")})
    again = observe(mirrored, {"nightly-a": Entry(D1, SHA)}, "day2")
    entry = again.entries["nightly-a"]
    assert (entry.first_seen, entry.mirror) == ("day1", "m/x")
    assert again == mirrored  # nothing changed: the file is written the same


def test_a_tag_moved_to_another_image_is_new_and_not_yet_mirrored() -> None:
    mirrored = Ledger("r/x", {"nightly-a": Entry(D1, SHA, first_seen="day1", mirror="m/x")})
    moved = observe(mirrored, {"nightly-a": Entry(D2, SHA)}, "day2").entries["nightly-a"]
    assert (moved.digest, moved.first_seen, moved.mirror) == (D2, "day2", None)


def test_a_dropped_tag_is_marked_gone_once_and_kept() -> None:
    ledger = Ledger("r/x", {"nightly-a": Entry(D1, SHA, mirror="m/x")})
    gone = observe(ledger, {}, "day2")
    assert gone.entries["nightly-a"].gone == "day2"
    assert observe(gone, {}, "day3").entries["nightly-a"].gone == "day2"
    assert gone.entries["nightly-a"].mirror == "m/x"
    back = observe(gone, {"nightly-a": gone.entries["nightly-a"]}, "day4")
    assert back.entries["nightly-a"].gone is None and back.entries["nightly-a"].mirror == "m/x"


def test_a_commit_runs_the_latest_mirrored_image_that_names_it() -> None:
    ledger = Ledger(
        "r/x",
        {
            "nightly-old": Entry(D1, SHA[:12], first_seen="day1", mirror="m/x"),
            "nightly-new": Entry(D2, SHA, first_seen="day2", mirror="m/x"),
            "unmirrored": Entry(D2, SHA, first_seen="day3"),
            "short": Entry(D2, SHA[:5], first_seen="day4", mirror="m/x"),
        },
    )
    assert ledger.find(SHA) == ("nightly-new", ledger.entries["nightly-new"])
    assert ledger.find("f" * 40) is None


def test_saved_and_loaded_it_is_the_same(tmp_path: Path) -> None:
    ledger = Ledger("r/x", {"t": Entry(D1, SHA, "tag t", platforms=("linux/amd64",))})
    save(tmp_path / "a" / "l.json", ledger)
    assert load(tmp_path / "a" / "l.json", "r/x") == ledger


def test_a_ledger_lives_in_the_users_data_folder() -> None:
    assert default_path("h/r/x", {"HOME": "/home/u"}) == Path(
        "/home/u/.local/share/llm-bisect/ledgers/h/r/x.json"
    )
    assert default_path("h/r", {"XDG_DATA_HOME": "/d", "HOME": "/h"}) == Path(
        "/d/llm-bisect/ledgers/h/r.json"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "is not a keep ledger"),
        ('{"version": 9, "source": "r/x"}', "not a version 1 ledger"),
        ('{"version": 1, "source": "r/y", "entries": {}}', "is the ledger of r/y, not of r/x"),
        ('{"version": 1, "source": "r/x", "entries": {"t": {"digest": 1}}}', "digest is 1"),
        (  # a hand-edited digest would go into `MIRROR@DIGEST`, then a pull or a URL
            '{"version": 1, "source": "r/x", "entries": {"t": {"digest": "sha256:../x"}}}',
            "digest is 'sha256:../x'",
        ),
    ],
)
def test_a_file_that_is_not_this_ledger_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "l.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="--ledger: ") as caught:
        load(path, "r/x")
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_ledger_is_empty_for_keep_and_an_error_for_a_run(tmp_path: Path) -> None:
    assert load(tmp_path / "none.json", "r/x") == Ledger("r/x")
    with pytest.raises(ConfigError, match=r"server\.ledger: no such ledger .* keep writes it"):
        load(tmp_path / "none.json", key="server.ledger")


def test_the_nightly_of_a_day_is_its_dated_tag_else_the_one_first_seen_that_day() -> None:
    other = "89abcdef0123456789abcdef0123456789abcdef"
    seen = {
        "nightly-0123456": Entry(D1, SHA[:7], first_seen="2026-08-09T03:00:00+00:00"),
        "nightly-89abcde": Entry(D2, other[:7], first_seen="2026-08-09T23:00:00+00:00"),
        "untagged": Entry(D2, None, first_seen="2026-08-10T01:00:00+00:00"),
    }
    ledger = Ledger("r/x", seen)
    assert ledger.nightly("2026-08-09") == ("nightly-89abcde", seen["nightly-89abcde"])
    assert ledger.nightly("2026-08-10") is None  # it names no commit
    dated = Ledger("r/x", {**seen, "nightly-20260809": Entry(D1, SHA, first_seen="2026-08-11")})
    found = dated.nightly("2026-08-09")
    assert found is not None and found[0] == "nightly-20260809"
