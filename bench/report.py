"""Figures, percentiles and the machine: one table for stdout and LATEST.md, JSON for results/.

Every figure names its unit; the table names the machine it ran on and the date. The
bench prints numbers only: nothing here compares a figure with a threshold.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Figure:
    """One row of the table: what was measured, the value as printed, and its unit.

    ``data`` keeps the raw numbers for the JSON file (percentiles, counts, per process);
    ``target`` is what the figure should reach, printed beside it (never checked).
    """

    section: str
    name: str
    value: str
    unit: str
    data: dict[str, Any] = field(default_factory=dict)
    target: str = ""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def lower_median(values: Sequence[float]) -> int:
    """The index of the median of ``values``, the lower middle of an even count (a NaN
    counts as the lowest): which of several passes or rounds a table shows."""
    keys = [-math.inf if math.isnan(value) else value for value in values]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return order[(len(order) - 1) // 2]


def spread(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 plus the sample count, for a figure's ``data``."""
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "n": float(len(values)),
    }


def first_error(errors: Sequence[str]) -> str:
    """`` (first: ...)`` naming the first of ``errors``, short enough for a table cell."""
    return f" (first: {errors[0][:80]})" if errors else ""


def num(value: float, digits: int = 1) -> str:
    """A number for the table: thousands separated, NaN as n/a."""
    if math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def machine() -> dict[str, str]:
    """nproc, RAM, CPU model, Python and kernel, for the table's header."""
    cpu = platform.processor() or "unknown"
    memory = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass  # not Linux: the header says "unknown"
    return {
        "nproc": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0),
        "ram": memory,
        "cpu": cpu,
        "python": sys.version.split()[0],
        "os": f"{platform.system()} {platform.release()}",
    }


def machine_line(info: dict[str, str]) -> str:
    """The machine in one line, as the table's header names it."""
    return (
        f"{info['nproc']} CPU ({info['cpu']}), {info['ram']} RAM, "
        f"Python {info['python']}, {info['os']}"
    )


def table(figures: Sequence[Figure]) -> str:
    """A Markdown table, one row per figure, the section named once."""
    rows = [("Section", "Figure", "Value", "Unit", "Target")]
    last = ""
    for figure in figures:
        rows.append((figure.section if figure.section != last else "", *_row(figure)))
        last = figure.section
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(rows[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in rows[1:]]
    return "\n".join(out)


def _row(figure: Figure) -> tuple[str, str, str, str]:
    return figure.name, figure.value, figure.unit, figure.target


def read_table(text: str) -> list[Figure]:
    """The figures of every table :func:`table` wrote into ``text`` (e.g. LATEST.md), each
    with its section, name, value, unit and target as printed (``data`` is not printed)."""
    figures: list[Figure] = []
    section = ""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) < 5 or cells[:2] == ["Section", "Figure"]:
            continue
        # A value may quote an error holding "|": the name never does, unit and target are last.
        section = cells[0] or section
        value = " | ".join(cells[2:-2])
        figures.append(Figure(section, cells[1], value, cells[-2], target=cells[-1]))
    return figures


_NAMED = re.compile(r"(?P<name>.+?) (?P<number>-?\d[\d,]*(?:\.\d+)?)")


def named_numbers(value: str) -> dict[str, float]:
    """``"orchestrator 44.7 · gateway 1,033.4"`` as ``{"orchestrator": 44.7, "gateway":
    1033.4}``: a value of named numbers as this module prints them; a remark in
    parentheses after a number is left out, and so is ``n/a``."""
    found: dict[str, float] = {}
    for part in value.split(" · "):
        match = _NAMED.fullmatch(part.split(" (", 1)[0].strip())
        if match is not None:
            found[match["name"]] = float(match["number"].replace(",", ""))
    return found


def _setting(key: str, value: Any) -> str:
    if isinstance(value, dict):  # e.g. seconds per section
        return f"{key}: " + ", ".join(f"{k} {v}" for k, v in value.items())
    return f"{key}={value}"


def header(info: dict[str, str], when: dt.datetime, settings: dict[str, Any]) -> str:
    """Date, machine and the run's settings, above the table."""
    knobs = "; ".join(_setting(k, v) for k, v in settings.items())
    return (
        f"CodeLab bench, {when:%Y-%m-%d %H:%M} UTC\n"
        f"Machine: {machine_line(info)}\n"
        f"Settings: {knobs}"
    )


def write_results(
    folder: Path,
    figures: Sequence[Figure],
    info: dict[str, str],
    when: dt.datetime,
    settings: dict[str, Any],
    prefix: str = "bench",
    extra: dict[str, Any] | None = None,
) -> Path:
    """``<folder>/<prefix>-<timestamp>.json`` with every figure's raw data."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{prefix}-{when:%Y%m%dT%H%M%SZ}.json"
    body = {
        "date": when.isoformat(timespec="seconds"),
        "machine": info,
        "settings": settings,
        "figures": [asdict(f) for f in figures],
        **(extra or {}),
    }
    path.write_text(json.dumps(_finite(body), indent=2, default=str, allow_nan=False) + "\n")
    return path


def _finite(value: Any) -> Any:
    """NaN (a figure with no samples) as null: NaN is not JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_latest(path: Path, text: str, when: dt.datetime) -> None:
    """bench/LATEST.md: the table with its date and machine (in ``text``), for the README."""
    path.write_text(
        f"# Latest benchmark\n\n"
        f"`make bench` on {when:%Y-%m-%d}; every run rewrites this file.\n\n{text}\n"
    )


def publish(
    figures: Sequence[Figure],
    settings: dict[str, Any],
    results_dir: Path,
    latest: Path | None,
    prefix: str = "bench",
    extra: dict[str, Any] | None = None,
) -> str:
    """Print the table to stdout, write the JSON (and LATEST.md when asked); returns the table."""
    when = dt.datetime.now(dt.UTC)
    info = machine()
    text = f"{header(info, when, settings)}\n\n{table(figures)}"
    print(text, flush=True)
    path = write_results(results_dir, figures, info, when, settings, prefix, extra)
    print(f"\nresults: {path}", flush=True)
    if latest is not None:
        write_latest(latest, text, when)
        print(f"table: {latest}", flush=True)
    return text
