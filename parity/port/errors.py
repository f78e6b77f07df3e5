"""The one error ``parity.port`` raises for what it cannot translate, and where a node came from."""

from __future__ import annotations

import re

__all__ = ["FALLBACK", "PortError", "node_description", "user_line"]

FALLBACK = (
    "write the JAX twin by hand (a jax_impl.nn Module with the torch model's attribute names) and plug it in "
    'with model: {torch: "pkg:Net", jax: "pkg:JaxNet"} (docs/port.md)'
)

# A frame of a traceback as Python prints it: `File "path", line N, in function` and the code on the next line.
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>[^\n]*)')


class PortError(NotImplementedError):
    """A torch model (or one of its nodes) that ``parity.port`` cannot translate.

    A ``NotImplementedError``, as the project raises for every torch feature it
    does not reproduce; the message names the node, its target, the source
    line and the fallback.
    """


def _is_user_file(path: str) -> bool:
    # torch's own frames (fx's tracer, nn.Module.__call__) and this package's say nothing about the model.
    normalized = path.replace("\\", "/")
    return "/torch/" not in normalized and "/parity/port/" not in normalized


def user_line(stack_text: str | None) -> str | None:
    """``path:line: code`` of the innermost frame of ``stack_text`` outside torch and this package."""
    if not stack_text:
        return None
    frames = [m for m in _FRAME.finditer(stack_text) if _is_user_file(m["file"])]
    if not frames:
        return None
    last = frames[-1]
    return f"{last['file']}:{last['line']}: {last['code'].strip()}"


def node_description(node) -> str:
    """``node 'name' (op target) at path:line: code``: what an error about an fx node names."""
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", repr(node.target))
    module = getattr(node.target, "__module__", None)
    if not isinstance(node.target, str) and module:
        target = f"{module}.{target}"
    where = user_line(node.stack_trace)
    return f"node {node.name!r} ({node.op} {target})" + (f" at {where}" if where else "")
