"""Compare two recordings (:class:`parity.Recorder` folders) and write the report ``parity run`` writes.

``compare_runs(run_a, run_b)`` matches the two recordings' names as :func:`parity.compare` matches keys
(the same dotted name on both sides) and measures, at every step both recorded, every scalar, and at
every kept step both recorded, every tensor, with the runner's measure
(:func:`parity.compare.scaled_error`: ``max |b - a| / max |a|``; NaN or infinity on one side only, or
another shape, is an infinite distance). ``run_a`` is the reference (torch's run).

The verdict, as ``parity run`` judges: a name *parts* at a step when its distance exceeds ``rtol`` and,
with a floor recording, also exceeds :data:`parity.floor.FLOOR_FACTOR` times torch's own float32
distance at that step (the floor: the float64 torch recording against the float32 one, see
:mod:`parity.floor`): for a kept step's tensors the worst tensor floor distance there, for the scalars
the worst scalar floor distance at that step or before (:func:`_judge_all` says why). The comparison
passes when no name parts at any step; otherwise the report names the first step where one does and the
first name (in ``run_a``'s recording order) that parts there.
Names and steps present on one side only are listed, never compared and never an error.

Reports: ``report.json`` (strict JSON: the :class:`parity.report.RunReport` fields, one epoch record
per kept step compared, plus a ``"recordings"`` section), ``report.md``, ``loss.png`` and
``divergence.png`` in ``out``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from parity.files import atomic_write
from parity.recording import Recording, RecordingError, read_recording, step_ranges
from parity.report import EpochRecord, RunReport, render_markdown, write_report

__all__ = ["RecordingsReport", "compare_runs", "default_rtol", "distance", "render_recordings_markdown",
           "write_recordings_report"]

FLOAT64_RTOL = 1e-10
FLOAT32_RTOL = 1e-4  # parity run's default train.tolerance.rtol
MAX_ROWS = 40  # report.md's per-name table: the names that part, then the largest distances


def default_rtol(a: Recording, b: Recording) -> float:
    """``1e-10`` when both recordings are float64, else ``1e-4`` (``parity run``'s default rtol)."""
    return FLOAT64_RTOL if a.dtype == b.dtype == "float64" else FLOAT32_RTOL


def distance(reference: Any, other: Any) -> float:
    """``max |other - reference| / max |reference|`` (the runner's measure) over finite elements.

    Elements equal on both sides (infinities included) count as no difference; NaN or infinity on one
    side only, or a shape difference, is ``inf``. Without any finite nonzero reference element the
    measure is the max absolute difference.
    """
    a, b = np.asarray(reference), np.asarray(other)
    if a.shape != b.shape:
        return math.inf
    a, b = a.astype(np.float64), b.astype(np.float64)
    if a.size == 0:
        return 0.0
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if not np.all(same | (np.isfinite(a) & np.isfinite(b))):
        return math.inf
    err = float(np.where(same, 0.0, np.abs(b - a)).max())
    finite = np.abs(a[np.isfinite(a)])
    scale = float(finite.max()) if finite.size else 0.0
    return err / scale if scale > 0 else err


@dataclasses.dataclass
class RecordingsReport(RunReport):
    """``parity run``'s :class:`parity.report.RunReport` with a ``recordings`` section: both folders, the
    first divergence, every name's last measure, and the names and steps only one side recorded."""

    recordings: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Measure:
    """One name at one step: its distance, torch's own float32 distance for it (NaN without a floor), the
    floor its group is judged by at that step (see :func:`_judge_all`), and the verdict."""

    step: int
    name: str
    kind: str
    ours: float
    floor: float
    max_abs: float = math.nan
    group_floor: float = math.nan
    parts: bool = False
    by_floor: bool = False


def _judge_all(measures: list[_Measure], rtol: float) -> None:
    """Set every measure's verdict, as :func:`parity.floor.judge` judges a run's parameters: a name parts when
    its distance exceeds ``rtol`` and :data:`parity.floor.FLOOR_FACTOR` times its group's floor at that step.

    The groups are a kept step's tensors, whose floor is their worst floor distance (the worst against the
    worst, as ``parity run`` compares its parameters), and a step's scalars, whose floor is the worst scalar
    floor distance at that step or any before it: one loss's rounding is noise (a step where torch's float32
    loss lands by chance within 1e-11 of its float64 loss says nothing about the precision), and rounding
    only accumulates over a run.
    """
    from parity.floor import FLOOR_FACTOR

    groups: dict[tuple[int, str], list[_Measure]] = {}
    for m in measures:
        groups.setdefault((m.step, m.kind), []).append(m)
    running = math.nan
    for (step, kind), group in sorted(groups.items()):
        floors = [m.floor for m in group if not math.isnan(m.floor)]
        floor = max(floors) if floors else math.nan
        if kind == "scalar":
            if floors:
                running = floor if math.isnan(running) else max(running, floor)
            floor = running
        for m in group:
            m.group_floor = floor
            if m.ours <= rtol:
                continue
            m.by_floor = not math.isnan(floor) and floor > 0 and m.ours <= FLOOR_FACTOR * floor
            m.parts = not m.by_floor


def compare_runs(run_a: str | Path, run_b: str | Path, *, floor: str | Path | None = None,
                 rtol: float | None = None, out: str | Path | None = None) -> RecordingsReport:
    """Compare two recordings step by step and name where they part (see the module docstring).

    Args:
      run_a: the reference recording's folder (torch's run), or a ``parity run`` folder: its
        ``recording-torch`` (:mod:`parity.run_recording`).
      run_b: the candidate's folder (the JAX port's run), or a ``parity run`` folder: its ``recording-jax``.
      floor: a float64 recording of ``run_a``'s loop (the same torch script in float64), for float32
        runs: ``run_a``'s distance from it is torch's own float32 distance per name and step. Default for a
        ``parity run`` folder ``run_a``: its ``recording-torch-float64`` when it has one.
      rtol: the tolerance on the runner's measure; default for a ``parity run`` folder ``run_a`` its
        config's ``train.tolerance.rtol``, else ``1e-10`` for two float64 recordings and ``1e-4`` otherwise.
      out: write ``report.json``, ``report.md``, ``loss.png`` and ``divergence.png`` in this folder
        (created); ``None`` writes nothing.

    Returns:
      The :class:`RecordingsReport`; ``passed`` is the verdict.

    Raises:
      RecordingError: a folder is missing or not a recording, or the two share no step.
    """
    from parity.run_recording import recording_folders

    run_a, run_b, floor, run_rtol = recording_folders(run_a, run_b, floor)
    a, b = read_recording(run_a), read_recording(run_b)
    f = read_recording(floor) if floor is not None else None
    if rtol is None:
        rtol = run_rtol if run_rtol is not None else default_rtol(a, b)
    if not (isinstance(rtol, (int, float)) and rtol >= 0):
        raise RecordingError(f"rtol must be a number >= 0, got {rtol!r}")
    common = sorted(set(a.scalars) & set(b.scalars))
    if not common:
        raise RecordingError(f"{a.folder} (steps {step_ranges(a.steps)}) and {b.folder} (steps "
                             f"{step_ranges(b.steps)}) share no recorded step")
    order = list(a.names) + [n for n in b.names if n not in a.names]
    rank = {name: i for i, name in enumerate(order)}
    loss = _loss_name(a, b)
    report = RecordingsReport(name=f"{a.folder.name} vs {b.folder.name}",
                       config={"train": {"tolerance": {"rtol": rtol}},
                               "recordings": {"a": str(a.folder), "b": str(b.folder),
                                              "floor": None if f is None else str(f.folder)}},
                       only=None, total_steps=None)
    measures: list[_Measure] = []
    for step in common:
        sa, sb = a.scalars[step], b.scalars[step]
        sf = f.scalars.get(step, {}) if f is not None else {}
        record: dict[str, Any] = {"step": step}
        if loss is not None:
            for key, side in (("torch_loss", sa), ("jax_loss", sb), ("torch_f64_loss", sf)):
                if loss in side:
                    record[key] = float(side[loss])
        for name in sorted(set(sa) & set(sb), key=rank.get):
            ours = distance(sa[name], sb[name])
            floor_d = distance(sf[name], sa[name]) if name in sf else math.nan
            measures.append(_Measure(step, name, "scalar", ours, floor_d, _max_abs(sa[name], sb[name])))
        record["scalars"] = {n: [sa.get(n), sb.get(n)] for n in sorted(set(sa) | set(sb), key=rank.get)}
        report.steps.append(record)
    kept = sorted(set(a.tensor_steps) & set(b.tensor_steps) & set(common))
    for index, step in enumerate(kept):
        ta, tb = a.tensors(step), b.tensors(step)
        tf = f.tensors(step) if f is not None and step in f.tensor_steps else {}
        rec = EpochRecord(epoch=index, steps=step)
        lrs = [float(a.scalars[step][n]) for n in a.scalars[step] if n == "lr" or n.endswith(".lr")]
        if lrs:
            rec.lr, rec.lrs = lrs[0], lrs if len(lrs) > 1 else []
        for name in sorted(set(ta) & set(tb), key=rank.get):
            ours = distance(ta[name], tb[name])
            floor_d = distance(tf[name], ta[name]) if name in tf else math.nan
            measures.append(_Measure(step, name, "tensor", ours, floor_d, _max_abs(ta[name], tb[name])))
            rec.leaves[name] = [ours, floor_d]
        if rec.leaves:
            rec.worst_leaf = max(rec.leaves, key=lambda n: rec.leaves[n][0])
            rec.param_max_rel = rec.leaves[rec.worst_leaf][0]
            rec.param_max_abs = max(m.max_abs for m in measures if m.step == step and m.kind == "tensor")
            floors = {n: v[1] for n, v in rec.leaves.items() if not math.isnan(v[1])}
            if floors:
                rec.floor_worst = max(floors, key=floors.get)
                rec.floor_max_rel = floors[rec.floor_worst]
        report.epochs.append(rec)
    _judge_all(measures, rtol)
    _verdict(report, measures, rtol, rank, a, b, f)
    report.recordings = _recordings_section(a, b, f, measures, common, kept, rank)
    if out is not None:
        write_recordings_report(report, out)
    return report


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if np.shape(a) != np.shape(b) or not np.size(a):
        return math.nan
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(np.asarray(b, np.float64) - np.asarray(a, np.float64)).ravel()
    diff = diff[~np.isnan(diff)]
    return float(diff.max()) if diff.size else math.nan


def _loss_name(a: Recording, b: Recording) -> str | None:
    """The scalar the loss plot shows: ``loss``, else the first scalar named ``*loss*``, else the first scalar."""
    scalars = [n for n, info in a.names.items() if info.get("kind") == "scalar" and n in b.names]
    for pick in (lambda n: n == "loss", lambda n: "loss" in n, lambda n: True):
        for name in scalars:
            if pick(name):
                return name
    return None


def _verdict(report: RunReport, measures: list[_Measure], rtol: float, rank: dict[str, int], a: Recording,
             b: Recording, f: Recording | None) -> None:
    from parity.floor import FLOOR_FACTOR

    parted = [m for m in measures if m.parts]
    floor_text = "" if f is None else f" and beyond {FLOOR_FACTOR:g}x torch's own float32 distance"
    if parted:
        first_step = min(m.step for m in parted)
        first = min((m for m in parted if m.step == first_step), key=lambda m: rank[m.name])
        worst = max((m for m in measures if m.step == first_step), key=lambda m: m.ours)
        report.passed, report.first_divergent_step, report.first_divergent_layer = False, first_step, first.name
        own = "" if math.isnan(first.group_floor) else f" ({first.group_floor:.3g} at that step)"
        report.message = (f"the runs part at step {first_step}: {first.name} first (max rel {first.ours:.3g} "
                          f"beyond rtol {rtol:g}{floor_text}{own}); worst there {worst.name} ({worst.ours:.3g})")
    else:
        report.passed = bool(measures)
        if not measures:
            report.message = "no name recorded on both sides"
        elif any(m.by_floor for m in measures):
            report.passed_by = "floor"
            ratio = max((m for m in measures if m.by_floor), key=lambda m: m.ours / m.group_floor)
            report.message = (f"{FLOOR_FACTOR:g}x torch's own float32-vs-float64 distance (largest ratio "
                              f"{ratio.ours / ratio.group_floor:.2g}: {ratio.name} at step {ratio.step})")
        elif not report.epochs or math.isnan(report.epochs[-1].param_max_rel):
            worst = max(measures, key=lambda m: m.ours)
            report.message = f"scalars within rtol {rtol:g} (max rel {worst.ours:.2g} at {worst.name})"
    notes = []
    for side, other, label in ((a, b, "A"), (b, a, "B")):
        if not side.complete:
            notes.append(f"recording {label} was not closed (interrupted at step {side.steps[-1] if side.steps else '-'})")
        only = sorted(set(side.scalars) - set(other.scalars))
        if only:
            notes.append(f"steps only in {label}: {step_ranges(only)}")
    if notes:
        report.message += ("; " if report.message else "") + "; ".join(notes)


def _recordings_section(a: Recording, b: Recording, f: Recording | None, measures: list[_Measure],
                        common: list[int], kept: list[int], rank: dict[str, int]) -> dict[str, Any]:
    last: dict[str, _Measure] = {}
    for m in measures:
        last[m.name] = m
    first_part = next((m for m in sorted(measures, key=lambda m: (m.step, rank[m.name])) if m.parts), None)
    return {
        "a": {"folder": str(a.folder), "framework": a.framework, "dtype": a.dtype, "complete": a.complete},
        "b": {"folder": str(b.folder), "framework": b.framework, "dtype": b.dtype, "complete": b.complete},
        "floor": None if f is None else {"folder": str(f.folder), "framework": f.framework, "dtype": f.dtype},
        "steps_compared": len(common),
        "tensor_steps_compared": kept,
        "steps_only_in_a": sorted(set(a.scalars) - set(b.scalars)),
        "steps_only_in_b": sorted(set(b.scalars) - set(a.scalars)),
        "names_only_in_a": [n for n in a.names if n not in b.names],
        "names_only_in_b": [n for n in b.names if n not in a.names],
        "first_divergent_name": None if first_part is None else first_part.name,
        "first_divergence": None if first_part is None else dataclasses.asdict(first_part),
        "divergent_step_names": [] if first_part is None else [
            dataclasses.asdict(m) for m in measures if m.step == first_part.step and m.parts],
        "last": {n: dataclasses.asdict(m) for n, m in sorted(last.items(), key=lambda kv: rank[kv[0]])},
    }


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _name_list(names: Iterable[str], limit: int = 20) -> str:
    names = list(names)
    shown = ", ".join(f"`{n}`" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def render_recordings_markdown(report: RecordingsReport) -> str:
    """``report.md`` of a comparison: ``parity run``'s page (verdict, table of kept steps, legend), with the
    divergence, the per-name table and what only one side recorded."""
    rec = report.recordings
    base = dataclasses.replace(report, first_divergent_step=None, first_divergent_layer=None,
                               epochs=[dataclasses.replace(e, leaves={}) for e in report.epochs])
    lines = render_markdown(base).splitlines()
    extra = ["Recordings: A = `{}` ({}, {}), B = `{}` ({}, {}){}; {} steps compared, tensors at {}.".format(
        rec["a"]["folder"], rec["a"]["framework"], rec["a"]["dtype"], rec["b"]["folder"], rec["b"]["framework"],
        rec["b"]["dtype"], "" if rec["floor"] is None else f", floor = `{rec['floor']['folder']}`",
        rec["steps_compared"], step_ranges(rec["tensor_steps_compared"])), ""]
    floor = rec["floor"] is not None
    if report.first_divergent_step is not None:
        extra += [f"First divergent step: {report.first_divergent_step}; the first name that parts there: "
                  f"`{rec['first_divergent_name']}`. Every name that parts at that step:", "",
                  "| name | kind | max rel | max abs |" + (" torch f32 vs f64 | judged by |" if floor else ""),
                  "|---|---|---:|---:|" + ("---:|---:|" if floor else "")]
        for m in rec["divergent_step_names"][:MAX_ROWS]:
            floors = f" {_fmt(m['floor'])} | {_fmt(m['group_floor'])} |" if floor else ""
            extra.append(f"| {m['name']} | {m['kind']} | {_fmt(m['ours'])} | {_fmt(m['max_abs'])} |{floors}")
        extra.append("")
    if rec["last"]:
        extra += ["Per name at its last step compared: B's distance from A" + (
                      ", beside torch's own float32-vs-float64 distance (the floor run's from A) and the floor its "
                      "group was judged by" if floor else "") + ".", "",
                  "| name | kind | step | max rel | max abs |" + (" torch f32 vs f64 | judged by |" if floor else "")
                  + " status |", "|---|---|---:|---:|---:|" + ("---:|---:|" if floor else "") + "---|"]
        rows = sorted(rec["last"].values(), key=lambda m: (not m["parts"], -_finite(m["ours"])))
        for m in rows[:MAX_ROWS]:
            status = "parts" if m["parts"] else ("ok (floor)" if m["by_floor"] else "ok")
            floors = f" {_fmt(m['floor'])} | {_fmt(m['group_floor'])} |" if floor else ""
            extra.append(f"| {m['name']} | {m['kind']} | {m['step']} | {_fmt(m['ours'])} | {_fmt(m['max_abs'])} |"
                         f"{floors} {status} |")
        if len(rows) > MAX_ROWS:
            extra.append(f"\n{len(rows) - MAX_ROWS} more names in report.json (`recordings.last`).")
        extra.append("")
    for key, label in (("names_only_in_a", "Names only in A (not compared)"),
                       ("names_only_in_b", "Names only in B (not compared)")):
        if rec[key]:
            extra += [f"{label}: {_name_list(rec[key])}.", ""]
    for key, label in (("steps_only_in_a", "Steps only in A"), ("steps_only_in_b", "Steps only in B")):
        if rec[key]:
            extra += [f"{label}: {step_ranges(rec[key])}.", ""]
    title = next(i for i, line in enumerate(lines) if line.startswith("# "))
    return "\n".join([*lines[:title + 2], *extra, *lines[title + 2:]]) + "\n"


def _finite(x: float | None) -> float:
    return -1.0 if x is None or (isinstance(x, float) and math.isnan(x)) else x


def write_recordings_report(report: RecordingsReport, folder: str | Path) -> None:
    """``parity run``'s report files in ``folder`` (created): ``report.json`` (with the recordings'
    section), the plots, and ``report.md`` with the divergence and per-name tables."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_report(report, folder)
    atomic_write(folder / "report.md", render_recordings_markdown(report))
