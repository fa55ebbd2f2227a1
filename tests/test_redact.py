"""Masking: whole texts, streams cut anywhere, credentials in URLs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llm_bisect.redact import Masker, Scrub, public_url, redact, url_credentials

SECRETS = st.lists(st.text("ab1:", min_size=1, max_size=6), max_size=3)
TEXT = st.text("ab1:x\n", max_size=80)


def streamed(text: str, secrets: list[str], cuts: list[int]) -> str:
    masker = Masker(secrets)
    data, out, at = text.encode(), b"", 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        out += masker.feed(data[at:cut])
        at = max(at, cut)
    out += masker.feed(data[at:]) + masker.flush()
    return out.decode()


@given(TEXT, SECRETS, st.lists(st.integers(min_value=0), max_size=8))
def test_a_stream_cut_anywhere_is_masked_as_the_whole_text(
    text: str, secrets: list[str], cuts: list[int]
) -> None:
    assert streamed(text, secrets, cuts) == redact(text, secrets)


@given(TEXT, SECRETS)
def test_no_secret_of_four_or_more_characters_survives(text: str, secrets: list[str]) -> None:
    masked = redact(text, secrets)
    for secret in secrets:
        if len(secret) >= 4:
            assert secret not in masked.replace("***", "\0")


def test_a_secret_split_across_pieces_is_masked() -> None:
    masker = Masker(["hf_secretToken"])
    out = masker.feed(b"x" * 16380 + b"HF_TOKEN=hf_sec") + masker.feed(b"retToken\nnext\n")
    assert out + masker.flush() == b"x" * 16380 + b"HF_TOKEN=***\nnext\n"


def test_short_values_are_never_masked() -> None:
    masker = Masker(["1", "no"])
    assert masker.feed(b"version 0.1.0, no") + masker.flush() == b"version 0.1.0, no"
    assert redact("version 0.1.0", ["1"]) == "version 0.1.0"
    assert Scrub().with_secrets(["1", "hf_longtoken"]).secrets == ("hf_longtoken",)


def test_overlapping_secrets_show_no_piece_of_either() -> None:
    assert redact("xabcdefg", ["bcdefg", "abcd"]) == "x***"


def test_credentials_in_a_url_are_secrets_and_hidden_from_its_public_form() -> None:
    url = "https://ci-bot:p%40ss-w0rd@wheels.example.com:8443/abc/cpu/"
    assert set(url_credentials(url)) >= {"p%40ss-w0rd", "p@ss-w0rd", "ci-bot:p%40ss-w0rd"}
    assert "ci-bot" not in url_credentials(url)  # a user with a password is not masked alone
    assert public_url(url) == "https://***@wheels.example.com:8443/abc/cpu/"
    assert url_credentials("https://tok3n-abc@h/x/") == ["tok3n-abc"]
    assert url_credentials("https://h/x/") == [] and public_url("https://h/x/") == "https://h/x/"
