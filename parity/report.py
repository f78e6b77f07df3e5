"""A parity run's report: its records, the verdict sentence, Markdown, strict JSON and plots.

The runner fills a :class:`RunReport` step by step; :func:`write_report`
puts ``report.json`` (strict JSON: ``null`` where a number is missing, never
``NaN``), ``report.md`` and the plots ``loss.png`` and ``divergence.png``
in the run folder, each written atomically.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from pathlib import Path
from typing import Any

from parity.files import atomic_write

__all__ = ["EpochRecord", "RunReport", "preload_plotting", "render_markdown", "report_from_dict", "strict_json", "write_report"]


@dataclasses.dataclass
class EpochRecord:
    """What the runner measures after an epoch (``NaN``/``None`` where a side did not run)."""

    epoch: int
    steps: int
    param_max_abs: float = math.nan
    param_max_rel: float = math.nan
    param_max_ulp: int | None = None
    worst_leaf: str | None = None
    buffer_max_rel: float = math.nan
    torch_accuracy: float = math.nan
    jax_accuracy: float = math.nan
    agreement: float = math.nan
    torch_seconds: float = math.nan
    jax_seconds: float = math.nan
    lr: float = math.nan  # group 0's, as torch's param_groups[0]["lr"]
    lrs: list[float] = dataclasses.field(default_factory=list)  # every group's, when there are several
    floor_max_rel: float = math.nan
    floor_worst: str | None = None
    # train.ema: the averaged parameters' distance (as param_max_rel) and its worst tensor.
    ema_max_rel: float = math.nan
    ema_worst_leaf: str | None = None
    # Per parameter and BatchNorm running statistic: [JAX-vs-torch max rel, torch f32-vs-f64 max rel (NaN
    # without the floor run)]. The verdict reads the parameters only.
    leaves: dict[str, list[float]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunReport:
    """A whole run: per-step losses, per-epoch records and the verdict.

    ``passed`` is the verdict on the final parameters: ``param_max_rel <=
    rtol`` (``passed_by == "tolerance"``), or for float32 runs within
    ``parity.floor.FLOOR_FACTOR`` times torch's own float32-vs-float64
    distance (``passed_by == "floor"``); ``interrupted`` marks a run stopped by SIGINT/SIGTERM or an error
    before its last step; ``message`` holds the reason of a failure.
    """

    name: str
    config: dict[str, Any]
    only: str | None
    steps: list[dict[str, float]] = dataclasses.field(default_factory=list)
    epochs: list[EpochRecord] = dataclasses.field(default_factory=list)
    passed: bool = True
    first_divergent_step: int | None = None
    first_divergent_layer: str | None = None
    run_dir: str | None = None
    message: str = ""
    interrupted: bool = False
    total_steps: int | None = None
    passed_by: str = "tolerance"
    init: str = ""

    @property
    def rtol(self) -> float:
        return float(self.config.get("train", {}).get("tolerance", {}).get("rtol", math.nan))

    def verdict(self) -> str:
        """One sentence with the numbers that decided the run, e.g.
        ``PASSED: parameters within rtol 0.0001 (max rel 2.8e-05 at fc2.weight) after 270 steps``."""
        done = len(self.steps)
        last = self.epochs[-1] if self.epochs else None
        if self.interrupted:
            of = f" of {self.total_steps}" if self.total_steps else ""
            return f"INTERRUPTED after {done}{of} steps" + (f": {self.message}" if self.message else "")
        if self.only is not None:
            if not self.passed:
                return f"FAILED ({self.only} only): {self.message}"
            return f"TRAINED ({self.only} only, no comparison) for {done} steps"
        if not self.passed:
            return "FAILED: " + (self.message or "parameters diverged")
        if last is None or math.isnan(last.param_max_rel):
            return f"PASSED: {self.message or 'no parameters compared'}"
        if self.passed_by == "floor":
            return (f"PASSED by torch's float32 floor: parameters max rel {last.param_max_rel:.2g} at "
                    f"{last.worst_leaf}, beyond rtol {self.rtol:g} but within {self.message or 'the floor'}, "
                    f"after {last.steps} steps")
        return (f"PASSED: parameters within rtol {self.rtol:g} (max rel {last.param_max_rel:.2g} at "
                f"{last.worst_leaf}) after {last.steps} steps" + (f"; {self.message}" if self.message else ""))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "epochs": [dataclasses.asdict(e) for e in self.epochs],
                "verdict": self.verdict()}


def report_from_dict(data: dict[str, Any]) -> RunReport:
    """The inverse of :meth:`RunReport.to_dict` (``null`` numbers become ``NaN`` again)."""
    fields = {f.name for f in dataclasses.fields(RunReport)}
    report = RunReport(**{k: v for k, v in data.items() if k in fields and k != "epochs"})
    nan_fields = {f.name for f in dataclasses.fields(EpochRecord) if f.default is not None and f.type == "float"}
    report.epochs = [EpochRecord(**{k: (math.nan if v is None and k in nan_fields else v) for k, v in e.items()})
                     for e in data.get("epochs", [])]
    for e in report.epochs:
        e.leaves = {k: [math.nan if x is None else x for x in v] for k, v in (e.leaves or {}).items()}
    return report


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "item"):  # numpy / torch scalars
        return strict_json(value.item())
    return str(value)


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "-" if math.isnan(x) else f"{x:.3g}"
    return str(x)


_LEGEND = [
    "- *lr*: the learning rate of the epoch's last step, as torch's `param_groups` hold it (every group's, "
    "separated by `/`, when there are several).",
    "- *param max rel*: per tensor `max |jax - torch| / max |torch|`, the worst tensor (named); the verdict "
    "compares it with `train.tolerance.rtol`.",
    "- *torch f32 floor*: the same measure between torch's float32 run and torch's float64 run of the same "
    "recipe (float32 runs): how far rounding alone carries torch from itself.",
    "- *agreement*: the share of held-out samples whose predicted class is the same in both frameworks.",
    "- `report.json` has more (max abs, ULP distance per epoch, every step's losses).",
]


def render_markdown(report: RunReport) -> str:
    """``report.md``: the verdict sentence first, then the per-epoch table and a legend."""
    lines = [f"**{report.verdict()}**", "", f"# parity run: {report.name}", ""]
    if report.init:
        lines += [report.init[0].upper() + report.init[1:] + ".", ""]
    if report.first_divergent_step is not None:
        lines += [f"First step whose losses differ beyond tolerance: {report.first_divergent_step}; replayed "
                  f"layer by layer, its first layer whose output differs: {report.first_divergent_layer}", ""]
    lines += ["| epoch | steps | lr | param max rel | worst tensor | torch f32 floor | BN buffers max rel | torch acc "
              "| jax acc | agreement | torch s | jax s |",
              "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for e in report.epochs:
        lines.append(
            f"| {e.epoch + 1} | {e.steps} | {' / '.join(map(_fmt, e.lrs or [e.lr]))} | {_fmt(e.param_max_rel)} | {_fmt(e.worst_leaf)} | "
            f"{_fmt(e.floor_max_rel)} | "
            f"{_fmt(e.buffer_max_rel)} | {_fmt(e.torch_accuracy)} | {_fmt(e.jax_accuracy)} | {_fmt(e.agreement)} | "
            f"{_fmt(e.torch_seconds)} | {_fmt(e.jax_seconds)} |"
        )
    if any(not math.isnan(e.ema_max_rel) for e in report.epochs):
        lines += ["", "Averaged weights (`train.ema`), torch's `AveragedModel` against `jax_impl.optim.swa_utils`':",
                  "", "| epoch | EMA max rel | worst tensor |", "|---:|---:|---|"]
        lines += [f"| {e.epoch + 1} | {_fmt(e.ema_max_rel)} | {_fmt(e.ema_worst_leaf)} |" for e in report.epochs]
    leaves = report.epochs[-1].leaves if report.epochs else {}
    if leaves and any(not math.isnan(f) for _, f in leaves.values()):
        lines += ["", f"Per tensor after step {report.epochs[-1].steps}: JAX's distance from torch beside torch's "
                      "own float32-vs-float64 distance.", "",
                  "| tensor | jax vs torch | torch f32 vs f64 | ratio |", "|---|---:|---:|---:|"]
        for name, (ours, floor) in sorted(leaves.items(), key=lambda kv: -kv[1][0]):
            ratio = ours / floor if floor > 0 else math.nan
            lines.append(f"| {name} | {_fmt(ours)} | {_fmt(floor)} | {_fmt(ratio)} |")
    if report.steps:
        last = report.steps[-1]
        lines += ["", f"Final step {last['step']}: torch loss {_fmt(last.get('torch_loss'))}, "
                      f"jax loss {_fmt(last.get('jax_loss'))}."]
    lines += ["", *_LEGEND, "", "Plots: `loss.png`, `divergence.png`."]
    return "\n".join(lines) + "\n"


def write_report(report: RunReport, folder: str | Path) -> None:
    """``report.json``, ``report.md``, ``loss.png`` and ``divergence.png`` in ``folder``, atomically."""
    folder = Path(folder)
    report.run_dir = str(folder)
    atomic_write(folder / "report.json", json.dumps(strict_json(report.to_dict()), indent=2, allow_nan=False))
    atomic_write(folder / "report.md", render_markdown(report))
    _plots(report, folder)


def preload_plotting() -> None:
    """Import matplotlib (about half a second) on a daemon thread, so that :func:`write_report` finds it loaded.

    Called as a run's training starts: the import then takes its turns at the interpreter while the
    training steps run in torch's and XLA's kernels, which let go of it, instead of after the last step.
    """
    threading.Thread(target=_import_pyplot, name="parity-preload-matplotlib", daemon=True).start()


def _import_pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display: the figures only become PNG files
    import matplotlib.pyplot as plt

    return plt


def _plots(report: RunReport, folder: Path) -> None:
    import io

    plt = _import_pyplot()

    steps = [s["step"] for s in report.steps]
    fig, ax = plt.subplots(figsize=(7, 4))
    for side, style in (("torch", "-"), ("jax", "--")):
        values = [s.get(f"{side}_loss", math.nan) for s in report.steps]
        if not all(math.isnan(v) for v in values):
            ax.plot(steps, values, style, label=side)
    ax.set(xlabel="step", ylabel="training loss", title=f"{report.name}: training loss")
    if ax.lines:
        ax.legend()
    _save(fig, folder / "loss.png", plt, io)

    fig, ax = plt.subplots(figsize=(7, 4))
    rel = [abs(s["torch_loss"] - s["jax_loss"]) / max(abs(s["torch_loss"]), 1e-30)
           if "torch_loss" in s and "jax_loss" in s else math.nan for s in report.steps]
    if any(v > 0 for v in rel if not math.isnan(v)):
        ax.semilogy(steps, [v if v > 0 else math.nan for v in rel], ".-", lw=0.8, ms=3, label="loss rel difference (per step)")
    floor_steps = [abs(s["torch_loss"] - s["torch_f64_loss"]) / max(abs(s["torch_f64_loss"]), 1e-30)
                   if "torch_f64_loss" in s and "torch_loss" in s else math.nan for s in report.steps]
    if any(v > 0 for v in floor_steps if not math.isnan(v)):
        ax.semilogy(steps, [v if v > 0 else math.nan for v in floor_steps], ".-", lw=0.6, ms=2, alpha=0.7,
                    label="torch f32 vs f64 loss (floor, per step)")
    ends = [(e.steps - 1, e.param_max_rel) for e in report.epochs if e.param_max_rel > 0]
    if ends:
        ax.semilogy(*zip(*ends), "o", label="params max rel (end of epoch)")
    floor = [(e.steps - 1, e.floor_max_rel) for e in report.epochs if e.floor_max_rel > 0]
    if floor:
        ax.semilogy(*zip(*floor), "s", mfc="none", label="torch f32 vs f64 params (floor)")
    if math.isfinite(report.rtol) and report.rtol > 0:
        ax.axhline(report.rtol, color="red", ls=":", label=f"rtol {report.rtol:g}")
        ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="|jax - torch| / |torch|", title=f"{report.name}: torch vs JAX")
    if ax.lines:
        ax.legend(fontsize="small")
    _save(fig, folder / "divergence.png", plt, io)


def _save(fig: Any, path: Path, plt: Any, io: Any) -> None:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write(path, buffer.getvalue())
