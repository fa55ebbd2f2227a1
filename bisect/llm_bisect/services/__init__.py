"""Services: one job each, typed in and out; the CLI parses, calls one, and renders.

- setup.py: a config loaded and checked into a Setup (source, checks, builder, launcher).
- bisection.py: `run` (a range bisected into DIR) and `check` (one candidate probed).
- gate.py: `gate` (a release candidate against the golden; on block, the bisection).
- localization.py: `localize` (where in the model two builds part), also after a run.
- golden.py: `golden` (the good build's reference) and `calibrate` (its noise floor).
- reap.py: `reap` (servers of killed llm-bisect processes).
Next: configs.py (configuration delta) and deps.py (dependency descent), each a service
taking a Setup and returning its document.
"""
