"""A YAML file read as data: capped in size and in what its aliases expand to, every value one
a request body can hold (JSON), no NUL; ConfigError naming what is wrong."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .files import read_capped


def not_json(value: Any, where: str = "") -> str | None:
    """What keeps a value parsed from YAML from being sent as JSON (`x.1.y is nan`), or None.

    YAML has `.nan`, `.inf`, dates, binary and sets; a request body holds none of them."""
    here = where or "the value"
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{here} is {value} (only finite numbers)"
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (wrong := not_json(item, f"{where}.{i}" if where else str(i))) is not None:
                return wrong
        return None
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"{here} has a key {k!r} that is not a string"
            if (wrong := not_json(item, f"{where}.{k}" if where else k)) is not None:
                return wrong
        return None
    return f"{here} is {type(value).__name__}"


def nul_at(value: Any, where: str = "") -> str | None:
    """The key of a string holding a NUL byte (no path, argument or variable can), or None."""
    found = string_at(value, lambda s: "\0" in s, where, keys=True)
    return None if found is None else found[0]


PLACEHOLDER = re.compile(r"<edit: [^<>]*>")
"""A value `llm-bisect init` writes where only the user knows it (`<edit: your namespace>`)."""


def placeholder_at(value: Any) -> tuple[str, str] | None:
    """(its key, the placeholder) of a value still `init`'s placeholder, or None."""
    return string_at(value, lambda s: PLACEHOLDER.fullmatch(s) is not None)


def string_at(
    value: Any, test: Callable[[str], bool], where: str = "", keys: bool = False
) -> tuple[str, str] | None:
    """(its key, the string) of the first string the test holds for (`keys`: a key's
    own string too), or None."""
    if isinstance(value, str):
        return (where or "the value", value) if test(value) else None
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for k, item in items:
        key = f"{where}.{k}" if where else str(k)
        if keys and isinstance(k, str) and test(k):
            return key, k
        found = string_at(item, test, key, keys)
        if found is not None:
            return found
    return None


MAX_CONFIG_BYTES = 16 * 2**20
"""The most bytes read of a config file: far past any real one."""

MAX_YAML_NODES = 200_000
"""Values a YAML document may hold once its aliases are expanded: a few hundred bytes of
`&a [*b, *b, ...]` expand to billions, and every reader of the data would walk them."""


def expanded_size(data: Any, limit: int = MAX_YAML_NODES) -> int | None:
    """How many values the data holds with every shared (aliased) part counted each time it
    appears; None past `limit` or where a part holds itself (`&a [*a]`). Pure; linear in
    the distinct parts."""
    sizes: dict[int, int] = {}
    open_now: set[int] = set()

    def size(value: Any) -> int | None:
        if not isinstance(value, dict | list):
            return 1
        key = id(value)
        if key in sizes:
            return sizes[key]
        if key in open_now:
            return None
        open_now.add(key)
        total = 1
        for item in value.values() if isinstance(value, dict) else value:
            inner = size(item)
            if inner is None:
                return None
            total += inner
            if total > limit:
                return None
        open_now.discard(key)
        sizes[key] = total
        return total

    return size(data)


def load_yaml(text: str, where: str) -> Any:
    """YAML text's data (safe_load); ConfigError naming `where` when it is not YAML, is nested
    too deep, or its aliases expand past MAX_YAML_NODES values (or into themselves)."""
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{where}: not valid YAML (nested too deep)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: not valid YAML{at}") from None
    except ValueError as exc:  # an integer of 4,300+ digits (Python's int limit)
        raise ConfigError(f"{where}: a value YAML cannot hold ({str(exc)[:80]})") from None
    try:
        fits = expanded_size(data)
    except RecursionError:
        fits = None
    if fits is None:
        raise ConfigError(
            f"{where}: its aliases (*name) expand past {MAX_YAML_NODES:,} values, or a value "
            "holds itself: write the values out"
        )
    return data


def read_yaml(path: Path, what: str) -> Any:
    """A YAML file's data, read up to MAX_CONFIG_BYTES; ConfigError naming what is wrong."""
    try:
        text = read_capped(path, MAX_CONFIG_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what} ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return load_yaml(text, str(path))
