"""Loads the kinds, once and explicitly: the built-in ones (kinds.BUILTIN), then those of
installed packages, by entry point, as pytest loads its default plugins and then setuptools'.

    # a package's pyproject.toml
    [project.entry-points."llm_bisect.kinds"]
    toy = "toy_kinds"            # a module whose import registers its kinds

The CLI, services.setup and `schema` call load() before they read a config; it also makes
config.rebuild a listener of the registries (a kind registered later, a test's toy, rebuilds
the config's unions). Importing a kind's module only registers that kind (kinds.py and
config.py have no side effect), so any module of the package imports first, and nothing
imports in a circle.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from . import config
from .errors import ConfigError
from .kinds import BUILTIN, held, on_change

GROUP = "llm_bisect.kinds"
"""The entry-point group of packages that add kinds."""

_loaded = False
_listening = False


def load() -> None:
    """Import the built-in kind modules, then every installed package's `llm_bisect.kinds`
    entry point, once; ConfigError (one line) naming an entry point that fails to load, or
    whose kind lacks a fact it must declare (kinds.Registry.register)."""
    global _loaded, _listening
    if _loaded:
        return
    if not _listening:  # the config's unions follow the registries from now on
        on_change(config.rebuild)
        _listening = True
    with held():
        for module in BUILTIN:
            importlib.import_module(module)
        for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
            try:
                point.load()
            except Exception as exc:  # another package's code: any failure is its own
                raise ConfigError(
                    f"kinds of {point.name!r} ({point.value}) could not load: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
    _loaded = True
