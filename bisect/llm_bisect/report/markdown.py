"""report.md: what a maintainer reads. Pure: result.json in, markdown out."""

from __future__ import annotations

from typing import Any

from ..checks.gsm8k import DETECTABLE_WARN
from ..fingerprint import flatten


def _cell(text: str, limit: int = 90) -> str:
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _probe(result: dict[str, Any], commit: str | None) -> dict[str, Any] | None:
    for p in result["probes"]:
        if p["commit"] == commit:
            found: dict[str, Any] = p
            return found
    return None


def _evidence(result: dict[str, Any]) -> list[str]:
    """The bad side's failing checks next to the good side's output for the same check."""
    rng = result["range"]
    if len(rng) < 2:
        return []
    old, new = _probe(result, rng[0]), _probe(result, rng[-1])
    if old is None or new is None:
        return []
    if result["mode"] == "regression":
        (bad_label, bad), (good_label, good) = ("first bad", new), ("last good", old)
    else:
        (bad_label, bad), (good_label, good) = ("last bad", old), ("first good", new)
    good_checks = {c["name"]: c for c in good["checks"]}
    lines: list[str] = []
    for check in (c for c in bad["checks"] if not c["passed"]):
        other = good_checks.get(check["name"])
        lines += [
            f"### `{check['name']}`",
            "",
            f"- **{bad_label}** `{bad['commit'][:12]}`: {_cell(check['evidence'], 400)}",
            f"- **{good_label}** `{good['commit'][:12]}`: "
            f"{_cell(other['evidence'] if other else '(not run)', 400)}",
            "",
        ]
    return ["## Evidence", "", *lines, *_divergences(bad)] if lines else []


def _side(token: dict[str, Any]) -> str:
    text = token.get("text")
    shown = (
        f"`{token['token']}` {_cell(repr(text), 24)}" if text is not None else f"`{token['token']}`"
    )
    return f"{shown} ({token['logprob']:.3f})"


def _top(token: dict[str, Any]) -> str:
    return ", ".join(
        f"{_cell(repr(t['text']), 16) if t.get('text') is not None else t['token']} "
        f"{t['logprob']:.2f}"
        for t in token.get("top", [])
    )


def _divergences(probe: dict[str, Any]) -> list[str]:
    """Where the bad side's greedy tokens first part from the golden's, prompt by prompt."""
    rows = []
    for check in probe["checks"]:
        if check["name"] != "logprobs":
            continue
        for case in check["details"].get("cases", []):
            d = case.get("divergence")
            teacher = f"{case.get('teacher_mean_abs_delta', 0.0):.3f}"
            if d is None:
                rows.append(f"| {_cell(repr(case['prompt']), 40)} | — | — | — | {teacher} | |")
                continue
            rows.append(
                f"| {_cell(repr(case['prompt']), 40)} | {d['position']} "
                f"| {_side(d['golden'])} | {_side(d['candidate'])} | {teacher} "
                f"| golden: {_top(d['golden'])}<br>now: {_top(d['candidate'])} |"
            )
    if not rows:
        return []
    return [
        "#### First divergence from the golden (logprobs)",
        "",
        "| prompt | position | golden token (logprob) | now | teacher-forced mean abs Δ | top-k |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _warnings(result: dict[str, Any]) -> list[str]:
    said = result.get("warnings") or []
    if not said:
        return []
    return ["## Warnings", "", *[f"- ⚠ {w}" for w in said], ""]


_IDENTITY = ("image.id", "image.digest", "image.ref", "server.", "kernels.engine_version")


def _identity(key: str) -> bool:
    """Keys that differ between any two commits (ids, versions), so they do not stand out."""
    return key.startswith(_IDENTITY) or (key.startswith("image.labels.") and "commit" in key)


def _fingerprints(result: dict[str, Any]) -> list[str]:
    """The two builds either side of the change, side by side; differences marked."""
    sides = result.get("fingerprints")
    if not sides:
        return []
    old, new = sides["old"], sides["new"]
    strip = ("commit", "verdict")
    fo = flatten({k: v for k, v in old.items() if k not in strip})
    fn = flatten({k: v for k, v in new.items() if k not in strip})
    keys = sorted(fo.keys() | fn.keys(), key=lambda k: (k.startswith("image.labels"), k))
    if not keys:
        return []
    old_label, new_label = (
        ("last good", "first bad") if result["mode"] == "regression" else ("last bad", "first good")
    )
    differ = set(sides["differences"])
    lines = [
        "## Builds compared",
        "",
        f"| | {old_label} `{old['commit'][:12]}` | {new_label} `{new['commit'][:12]}` |",
        "|---|---|---|",
    ]
    for key in keys:
        mark = "**⚠ " + key + "**" if key in differ else key
        lines.append(f"| {mark} | {_cell(fo.get(key, '—'), 70)} | {_cell(fn.get(key, '—'), 70)} |")
    changed = [k for k in keys if k in differ and not _identity(k)]
    if changed:
        lines += [
            "",
            "Changed besides the build's identity: " + ", ".join(f"`{k}`" for k in changed),
        ]
    return [*lines, ""]


def _power(result: dict[str, Any]) -> list[str]:
    """How small an accuracy drop the eval could see; a warning when it is coarse."""
    power = result.get("eval_power")
    if not power:
        return []
    drop, n = power["detectable_drop"], power["n"]
    line = (
        f"The eval's {n} problems detect an accuracy drop of {drop:.1%} or more from the "
        f"golden's {power['golden_accuracy']:.0%} (one-sided alpha {power['alpha']}, "
        f"power {power['power']})."
    )
    if drop > DETECTABLE_WARN:
        line = (
            f"⚠ {line} A smaller regression passes unseen: give the eval more problems "
            "(`path:` to a larger set, or a higher `limit`)."
        )
    return ["## Eval power", "", line, ""]


def _thresholds(result: dict[str, Any]) -> list[str]:
    limits = result.get("thresholds") or {}
    rows = [
        f"| {check} | {key} | {limit['value']:.4g} | {limit['from']} |"
        for check, values in limits.items()
        for key, limit in values.items()
    ]
    if not rows:
        return []
    head = ["## Thresholds", "", "| check | limit | value | from |", "|---|---|---|---|"]
    return [*head, *rows, ""]


CURVE_ROWS = 12
"""Module outputs shown around the first divergence."""


def _localization(result: dict[str, Any]) -> list[str]:
    """Where in the model the culprit's effect enters (the localisation probes)."""
    found = result.get("localization")
    if not found:
        return []
    lines = ["## Where in the model", "", found.get("line", ""), ""]
    if found.get("error"):
        return lines
    if found.get("why"):
        lines += [f"({found['why']})", ""]
    seconds = found.get("seconds") or {}
    lines.append(
        f"Last good `{found['good'][:12]}` and first bad `{found['bad'][:12]}`, teacher-forced "
        f"on the same {found.get('tokens', 0)} tokens with the worker extension "
        f"({' '.join(found.get('forced', []))}); "
        + ", ".join(f"{role} {s:.0f}s" for role, s in seconds.items())
        + "."
    )
    lines.append("")
    ranks = found.get("ranks") or []
    rank = next(
        (r for r in ranks if r.get("rank") == found.get("rank")), ranks[0] if ranks else None
    )
    curve = rank.get("curve", []) if rank else []
    if curve:
        at = next((i for i, (_, d) in enumerate(curve) if d > (found.get("tolerance") or 1.0)), 0)
        shown = curve[max(0, at - 3) : max(0, at - 3) + CURVE_ROWS]
        lines += ["| module output | relative difference |", "|---|---|"]
        lines += [f"| `{m}` | {d:.3g} |" for m, d in shown]
        lines.append("")
    return lines


def render_markdown(result: dict[str, Any]) -> str:
    """The report of a run."""
    status = result["status"]
    lines = ["# llm-bisect report", ""]
    what = "first bad commit" if result["mode"] == "regression" else "first good commit (fix)"
    lines.append(f"**Status:** {status} — {result['message']}")
    lines.append("")
    lines.append(f"- good: `{result['good']}`")
    lines.append(f"- bad: `{result['bad']}`")
    if result.get("merge_base"):
        lines.append(f"- merge base: `{result['merge_base']}`")
    lines.append(f"- candidates: {result['candidates']}, probes run: {len(result['probes'])}")
    lines.append(f"- what counts as a regression: `regress: {result.get('regress', 'semantic')}`")
    lines.append("")
    culprit = result["culprit"]
    if culprit:
        lines += [
            f"## Culprit: {what}",
            "",
            f"`{culprit['commit']}` {culprit['subject']}",
            "",
            f"- author: {culprit['author']}",
            f"- date: {culprit['date']}",
            "",
        ]
    if status == "ambiguous":
        lines += ["## Could be any of", ""]
        lines += [f"- `{c}`" for c in result["range"][1:]]
        lines += ["", f"(after the last tested `{result['range'][0][:12]}`)", ""]
    if result.get("fix_range"):
        base, ref = result["fix_range"]
        lines += [
            "## Where to look instead",
            "",
            f"The change is older than the branch point. The range `{base[:12]}..{ref[:12]}` "
            "holds the commit that undid it; bisect it with `--find-fix`.",
            "",
        ]
    lines += _warnings(result)
    lines += _localization(result)
    lines += _evidence(result)
    lines += _fingerprints(result)
    lines += _thresholds(result)
    lines += _power(result)
    lines += [
        "## Probes",
        "",
        "| # | commit | subject | verdict | reason | seconds |",
        "|---|--------|---------|---------|--------|---------|",
    ]
    for i, p in enumerate(result["probes"], 1):
        seconds = p["timings"].get("total")
        lines.append(
            f"| {i} | `{p['commit'][:12]}` | {_cell(p.get('subject', ''), 60)} "
            f"| {p['verdict']} | {_cell(p['reason'])} "
            f"| {'' if seconds is None else f'{seconds:.1f}'} |"
        )
    skipped = [p for p in result["probes"] if p["verdict"] == "skip" and p.get("log_tail")]
    if skipped:
        lines += ["", "## Untestable builds", ""]
        for p in skipped:
            lines += [f"`{p['commit'][:12]}`: {p['reason']}", "", "```", p["log_tail"], "```", ""]
    return "\n".join(lines).rstrip() + "\n"
