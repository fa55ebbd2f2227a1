"""The services by the names scripts call them: `setup` a config, then run one service.

Each job is its own module under services/ (setup, bisection, gate, localization, golden,
reap); this module only names them, for scripts that import `llm_bisect.app`.
"""

from __future__ import annotations

from .services.bisection import check_one, run_bisect
from .services.gate import BISECT_DIR, GATE_FILE, compared_builds, run_gate
from .services.golden import Calibration, calibrate, record_golden
from .services.localization import (
    CAPTURE,
    EXTENSION,
    LOCALIZATION,
    WORKER_DIR,
    culprit_pair,
    localize_after_run,
    localize_builds,
    localize_instrument,
    localize_refs,
    stored_localization,
    with_localization,
)
from .services.reap import Reaped, reap_servers
from .services.setup import (
    Setup,
    golden_file_of,
    plan_of,
    run_context,
    run_id_of,
    serving,
    setup,
    slot_devices_of,
    with_ends,
    with_engine_cache,
)

__all__ = [
    "BISECT_DIR",
    "CAPTURE",
    "EXTENSION",
    "GATE_FILE",
    "LOCALIZATION",
    "WORKER_DIR",
    "Calibration",
    "Reaped",
    "Setup",
    "calibrate",
    "check_one",
    "compared_builds",
    "culprit_pair",
    "golden_file_of",
    "localize_after_run",
    "localize_builds",
    "localize_instrument",
    "localize_refs",
    "plan_of",
    "reap_servers",
    "record_golden",
    "run_bisect",
    "run_context",
    "run_gate",
    "run_id_of",
    "serving",
    "setup",
    "slot_devices_of",
    "stored_localization",
    "with_ends",
    "with_engine_cache",
    "with_localization",
]
