"""What a run tells the person waiting for it, on stderr: phases with elapsed time, then a step bar.

stdout stays for the report (``parity run > report.md`` captures the report,
not the bar). The bar puts the elapsed time before the bar itself, so it
stays visible on an 80-column terminal.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from parity import interrupt

__all__ = ["Phases", "step_bar"]


class Phases:
    """``phases("building models")`` prints ``parity [  3.1s] building models`` to stderr.

    Args:
      enabled: print nothing when False (``--no-progress``, tests).
      start: the clock's zero (``time.perf_counter()`` at the command's start).
    """

    def __init__(self, enabled: bool = True, start: float | None = None) -> None:
        self.enabled = enabled
        self.start = time.perf_counter() if start is None else start

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def __call__(self, text: str) -> None:
        interrupt.check()  # a Ctrl-C during the previous phase is taken here
        if self.enabled:
            print(f"parity [{self.elapsed():6.1f}s] {text}", file=sys.stderr, flush=True)


def step_bar(enabled: bool) -> Any:
    """A rich progress bar on stderr: ``name  0:00:12 ━━━━━━  120/270  epoch 2/3 loss ...``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), TimeElapsedColumn(), BarColumn(bar_width=20),
                    MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                    console=Console(stderr=True), disable=not enabled, transient=False)
