"""llm-bisect's path hook: which module files a server's Python processes import.

Put first on PYTHONPATH of the server that records the golden (probe.py), with
LLM_BISECT_LOADS naming a folder: every Python process started with that environment (the
API server, the engine core, the workers, spawned or forked) appends the file of each module
it imports, relative to the folder its top-level package lies in
(`vllm/model_executor/models/llama.py`), one a line, to LLM_BISECT_LOADS/<pid>.txt, as it
imports it: a process that ends with os._exit (a forked worker) loses nothing. Standard
library modules are left out. It changes nothing the process does: the spec it finds is the
one the import system would have found, and any failure of its own is swallowed. Another
sitecustomize further on the path still runs. It imports nothing of llm-bisect (it runs in
the engine's interpreter).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType

VAR = "LLM_BISECT_LOADS"


class _Recorder:
    """A meta path finder that asks the finders after it, notes the file, and returns what
    they found."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.fd = -1
        self.pid = -1
        self.busy = False
        self.skip = frozenset(getattr(sys, "stdlib_module_names", ()))

    def _write(self, line: str) -> None:
        if self.pid != os.getpid():  # a forked child writes a file of its own
            self.pid = os.getpid()
            os.makedirs(self.folder, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            self.fd = os.open(os.path.join(self.folder, f"{self.pid}.txt"), flags, 0o644)
        os.write(self.fd, (line + "\n").encode("utf-8", "surrogateescape"))

    def find_spec(
        self,
        name: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if self.busy:
            return None
        self.busy = True
        try:
            found: ModuleSpec | None = None
            for finder in sys.meta_path[sys.meta_path.index(self) + 1 :]:
                find = getattr(finder, "find_spec", None)
                if find is None:
                    return None  # an old-style finder: left to the import system
                found = find(name, path, target)
                if found is not None:
                    break
            if found is not None and name.partition(".")[0] not in self.skip:
                origin = getattr(found, "origin", None)
                if isinstance(origin, str) and os.path.isabs(origin):
                    depth = name.count(".") + 1
                    if os.path.basename(origin).startswith("__init__."):
                        depth += 1
                    parts = origin.replace(os.sep, "/").split("/")
                    with contextlib.suppress(OSError):  # nowhere to write: record nothing
                        self._write("/".join(parts[-depth:]))
            return found
        except Exception:  # never the hook's failure: the import system finds on its own
            return None
        finally:
            self.busy = False


def _install() -> None:
    folder = os.environ.get(VAR)
    if not folder:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    sys.meta_path.insert(0, _Recorder(folder))
    # the sitecustomize this one hides, where there is one further on the path
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


with contextlib.suppress(Exception):  # a hook that fails records nothing, changes nothing
    _install()
