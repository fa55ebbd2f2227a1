"""Loads the kinds, once and explicitly: the built-in ones (kinds.BUILTIN), then those of
installed packages, by entry point, as pytest loads its default plugins and then setuptools'.

    # a package's pyproject.toml
    [project.entry-points."llm_bisect.kinds"]
    toy = "toy_kinds"            # a module whose import registers its kinds

The CLI, services.setup and `schema` call load() before they read a config; importing a
kind's module only registers that kind (kinds.py has no side effect), so any module of the
package imports first, and nothing imports in a circle.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from .errors import ConfigError
from .kinds import BUILTIN, held

GROUP = "llm_bisect.kinds"
"""The entry-point group of packages that add kinds."""

_loaded = False


def load() -> None:
    """Import the built-in kind modules, then every installed package's `llm_bisect.kinds`
    entry point, once; ConfigError (one line) naming an entry point that fails to load."""
    global _loaded
    if _loaded:
        return
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
