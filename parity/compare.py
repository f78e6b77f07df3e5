"""Compare torch objects with JAX pytrees, leaf by leaf.

``compare(torch_obj, jax_obj)`` flattens both sides to dotted key paths (see
:func:`parity._tree.flatten`), matches leaves by key, and measures for every
leaf the max absolute error, the max relative error, the max ULP distance and
the fraction of bit-identical elements. Mismatched keys, shapes and dtypes are
reported as failures, never raised. ``assert_parity`` raises an
``AssertionError`` carrying the report's table, which names the worst leaf.

Tolerances are elementwise and disjunctive: an element passes when it is
bit-identical, both sides are NaN (``equal_nan``), ``|a - b| <= atol +
rtol * |a|`` (``a`` is the torch/reference side, as in ``torch.testing``), or
its ULP distance is at most ``max_ulp``. With the defaults (all zero, no
``max_ulp``) only exact equality passes.

Random-number state on the JAX side (``flax.nnx`` ``RngKey``/``RngCount``
variables, e.g. a ``Dropout(rngs=...)``'s stream, and arrays of a PRNG-key
dtype) has no counterpart in a torch ``state_dict``: those leaves are
skipped, not compared, and listed in the report's ``skipped``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import numpy as np

from parity._tree import flatten, jax_key_name
from parity.ulp import ulp_distance

__all__ = ["LeafReport", "ComparisonReport", "compare", "assert_parity", "scaled_error"]


@dataclasses.dataclass(frozen=True)
class LeafReport:
    """Agreement of one leaf. Error fields are ``nan`` when nothing was compared.

    Attributes:
      key: dotted key path, torch's ``state_dict`` spelling.
      status: ``"ok"``, ``"mismatch"``, ``"missing"`` (only in the reference),
        ``"unexpected"`` (only in the candidate), ``"shape mismatch"`` or
        ``"dtype mismatch"``.
      max_ulp: max ULP distance over non-NaN elements, measured in the
        narrower of the two dtypes (integers: the absolute difference).
      frac_identical: fraction of elements that are bit-identical (or both NaN).
      nan_mismatch: elements that are NaN on exactly one side.
      both_nan: elements that are NaN on both sides.
      worst_index: index of the element with the largest ULP distance.
    """

    key: str
    status: str
    ref_shape: tuple[int, ...] | None = None
    ref_dtype: str | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    numel: int = 0
    max_abs: float = math.nan
    max_rel: float = math.nan
    max_ulp: int | None = None
    frac_identical: float = math.nan
    nan_mismatch: int = 0
    both_nan: int = 0
    failing: int = 0
    worst_index: tuple[int, ...] | None = None

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ComparisonReport:
    """All leaf reports of one comparison, with the tolerances that judged them."""

    leaves: tuple[LeafReport, ...]
    rtol: float
    atol: float
    max_ulp_allowed: int | None
    skipped: tuple[str, ...] = ()  # RNG-state leaves of the candidate, not compared

    @property
    def passed(self) -> bool:
        return all(leaf.passed for leaf in self.leaves)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failures(self) -> tuple[LeafReport, ...]:
        return tuple(leaf for leaf in self.leaves if not leaf.passed)

    @property
    def compared(self) -> tuple[LeafReport, ...]:
        return tuple(leaf for leaf in self.leaves if leaf.max_ulp is not None)

    @property
    def max_abs(self) -> float:
        return max((leaf.max_abs for leaf in self.compared), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((leaf.max_rel for leaf in self.compared), default=0.0)

    @property
    def max_ulp(self) -> int:
        return max((leaf.max_ulp for leaf in self.compared), default=0)

    @property
    def worst(self) -> LeafReport | None:
        """The first failing leaf by structure, else the leaf with the largest ULP distance."""
        failures = [leaf for leaf in self.failures if leaf.max_ulp is None]
        if failures:
            return failures[0]
        ranked = sorted(
            self.compared,
            key=lambda leaf: (not leaf.passed, leaf.nan_mismatch, leaf.max_ulp, leaf.max_rel),
            reverse=True,
        )
        return ranked[0] if ranked else None

    def to_dict(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "passed": self.passed,
            "rtol": self.rtol,
            "atol": self.atol,
            "max_ulp_allowed": self.max_ulp_allowed,
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "max_ulp": self.max_ulp,
            "worst_leaf": worst.key if worst else None,
            "leaves": [leaf.to_dict() for leaf in self.leaves],
            "skipped": list(self.skipped),
        }

    def table(self, max_rows: int | None = 40) -> str:
        """A plain-text table: failing leaves first, then the largest ULP distances."""
        rows = sorted(
            self.leaves,
            key=lambda leaf: (leaf.passed, -(leaf.max_ulp or 0), -_finite(leaf.max_rel), leaf.key),
        )
        hidden = 0
        if max_rows is not None and len(rows) > max_rows:
            hidden = len(rows) - max_rows
            rows = rows[:max_rows]
        worst = self.worst
        header = ("", "leaf", "shape", "dtype", "max abs", "max rel", "max ULP", "identical", "status")
        body = [
            (
                "*" if worst is not None and leaf.key == worst.key else "",
                leaf.key or "<root>",
                _shape_text(leaf),
                _dtype_text(leaf),
                _num(leaf.max_abs),
                _num(leaf.max_rel),
                "-" if leaf.max_ulp is None else str(leaf.max_ulp),
                "-" if math.isnan(leaf.frac_identical) else f"{100 * leaf.frac_identical:.1f}%",
                _status_text(leaf),
            )
            for leaf in rows
        ]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *body]]
        lines.insert(1, "  ".join("-" * width for width in widths))
        if hidden:
            more_failing = len(self.failures) - sum(not leaf.passed for leaf in rows)
            lines.append(f"... {hidden} more leaves not shown ({more_failing} of them failing)")
        lines.append(self.summary())
        return "\n".join(lines)

    def summary(self) -> str:
        tolerance = f"rtol={self.rtol:g}, atol={self.atol:g}" + (
            f", max_ulp={self.max_ulp_allowed}" if self.max_ulp_allowed is not None else ""
        )
        verdict = "PASS" if self.passed else f"FAIL ({len(self.failures)} of {len(self.leaves)} leaves)"
        worst = self.worst
        text = f"{verdict} at {tolerance}; max abs {_num(self.max_abs)}, max rel {_num(self.max_rel)}, max ULP {self.max_ulp}"
        if worst is not None:
            where = f" at index {worst.worst_index}" if worst.worst_index is not None else ""
            text += f"; worst leaf: {worst.key or '<root>'} ({_status_text(worst)}{where})"
        if self.skipped:
            text += f"; {len(self.skipped)} RNG-state leaves skipped: {', '.join(self.skipped)}"
        return text

    def __str__(self) -> str:
        return self.table()


def _finite(value: float) -> float:
    return -1.0 if math.isnan(value) else value


def _num(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"


def _shape_text(leaf: LeafReport) -> str:
    if leaf.status == "shape mismatch":
        return f"{leaf.ref_shape} vs {leaf.shape}"
    return str(leaf.ref_shape if leaf.ref_shape is not None else leaf.shape)


def _dtype_text(leaf: LeafReport) -> str:
    if leaf.ref_dtype is not None and leaf.dtype is not None and leaf.ref_dtype != leaf.dtype:
        return f"{leaf.ref_dtype} vs {leaf.dtype}"
    return str(leaf.ref_dtype or leaf.dtype)


def _status_text(leaf: LeafReport) -> str:
    if leaf.status == "mismatch":
        parts = [f"{leaf.failing} elements out of tolerance"]
        if leaf.nan_mismatch:
            parts.append(f"{leaf.nan_mismatch} NaN on one side only")
        return "mismatch: " + ", ".join(parts)
    if leaf.status == "ok" and leaf.both_nan:
        return f"ok ({leaf.both_nan} NaN on both sides)"
    return leaf.status


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _narrower(a: np.dtype, b: np.dtype) -> np.dtype:
    return a if a.itemsize <= b.itemsize else b


def _as_real(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "c":
        return np.stack([x.real, x.imag], axis=-1)
    if x.dtype.kind == "b":
        return x.astype(np.int64)
    return x


def _compare_leaf(
    key: str, ref: np.ndarray, other: np.ndarray, *, rtol: float, atol: float, max_ulp: int | None, equal_nan: bool, check_dtype: bool
) -> LeafReport:
    common = dict(key=key, ref_shape=tuple(ref.shape), ref_dtype=str(ref.dtype), shape=tuple(other.shape), dtype=str(other.dtype))
    if ref.shape != other.shape:
        return LeafReport(status="shape mismatch", **common)
    dtype_ok = ref.dtype == other.dtype
    a = _as_real(ref)
    b = _as_real(other)
    numel = int(a.size)
    if _is_float(a.dtype) or _is_float(b.dtype):
        grid = _narrower(a.dtype, b.dtype) if (_is_float(a.dtype) and _is_float(b.dtype)) else (a.dtype if _is_float(a.dtype) else b.dtype)
        a_grid = a.astype(grid)
        b_grid = b.astype(grid)
        a64 = a.astype(np.float64)
        b64 = b.astype(np.float64)
        a_nan = np.isnan(a64)
        b_nan = np.isnan(b64)
        nan_mismatch = a_nan != b_nan
        both_nan = a_nan & b_nan
        valid = ~(a_nan | b_nan)
        same = (a64 == b64) | both_nan
        with np.errstate(invalid="ignore", over="ignore"):
            abs_err = np.where(valid & ~same, np.abs(a64 - b64), 0.0)
            scale = np.maximum(np.abs(a64), np.abs(b64))
            rel_err = np.where(abs_err > 0, abs_err / np.where(scale > 0, scale, 1.0), 0.0)
            rel_err = np.where(np.isinf(abs_err), np.inf, rel_err)
            within = abs_err <= atol + rtol * np.abs(a64)
        ulps = np.where(valid, ulp_distance(a_grid, b_grid), np.uint64(0))
        if max_ulp is not None:
            within = within | (ulps <= np.uint64(max_ulp))
        identical = _bit_identical(a, b) | both_nan
        element_ok = (valid & (same | within)) | (both_nan if equal_nan else False)
    else:
        a64 = a.astype(np.int64)
        b64 = b.astype(np.int64)
        abs_int = np.abs(a64 - b64)
        abs_err = abs_int.astype(np.float64)
        scale = np.maximum(np.abs(a64), np.abs(b64)).astype(np.float64)
        rel_err = np.where(abs_err > 0, abs_err / np.where(scale > 0, scale, 1.0), 0.0)
        ulps = abs_int.astype(np.uint64)
        nan_mismatch = both_nan = np.zeros(a.shape, dtype=bool)
        identical = a64 == b64
        element_ok = identical | (abs_err <= atol + rtol * np.abs(a64))
        if max_ulp is not None:
            element_ok |= ulps <= np.uint64(max_ulp)
    failing = int(numel - np.count_nonzero(element_ok))
    worst_index = None
    if numel:
        flat = int(np.argmax(ulps)) if np.any(ulps) else int(np.argmax(abs_err))
        worst_index = tuple(int(i) for i in np.unravel_index(flat, ulps.shape))
    if not dtype_ok and check_dtype:
        status = "dtype mismatch"
    else:
        status = "ok" if failing == 0 else "mismatch"
    return LeafReport(
        status=status,
        numel=numel,
        max_abs=float(abs_err.max()) if numel else 0.0,
        max_rel=float(rel_err.max()) if numel else 0.0,
        max_ulp=int(ulps.max()) if numel else 0,
        frac_identical=float(np.count_nonzero(identical) / numel) if numel else 1.0,
        nan_mismatch=int(np.count_nonzero(nan_mismatch)),
        both_nan=int(np.count_nonzero(both_nan)),
        failing=failing,
        worst_index=worst_index,
        **common,
    )


def _bit_identical(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == b.dtype:
        return np.ascontiguousarray(a).view(np.uint8).reshape(*a.shape, a.dtype.itemsize).__eq__(
            np.ascontiguousarray(b).view(np.uint8).reshape(*b.shape, b.dtype.itemsize)
        ).all(axis=-1)
    return a.astype(np.float64) == b.astype(np.float64)


def compare(
    torch_obj: Any,
    jax_obj: Any,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    max_ulp: int | None = None,
    equal_nan: bool = True,
    check_dtype: bool = True,
) -> ComparisonReport:
    """Compares a torch object (the reference) with a JAX/NumPy object, leaf by leaf.

    Args:
      torch_obj: tensor, ``nn.Module``, ``state_dict``, optimizer ``state_dict``,
        or any nesting of dicts, lists and tuples of tensors/arrays/scalars.
      jax_obj: the candidate: a JAX pytree, ``nnx.Module``/``nnx.State``,
        NumPy array, or the same nestings. Keys are matched by dotted path.
      rtol, atol: an element passes when ``|a - b| <= atol + rtol * |a|``.
      max_ulp: an element also passes when within this many ULPs.
      equal_nan: NaN on both sides counts as equal (NaN on one side never does).
      check_dtype: a dtype difference fails the leaf (errors are still measured).

    Returns:
      A :class:`ComparisonReport`; never raises on mismatched structure.
    """
    ref = flatten(torch_obj)
    jax_obj, skipped = _without_rng_state(jax_obj)
    cand = flatten(jax_obj)
    leaves: list[LeafReport] = []
    for key, ref_leaf in ref.items():
        if key not in cand:
            leaves.append(LeafReport(key=key, status="missing", ref_shape=tuple(ref_leaf.shape), ref_dtype=str(ref_leaf.dtype)))
            continue
        leaves.append(
            _compare_leaf(key, ref_leaf, cand[key], rtol=rtol, atol=atol, max_ulp=max_ulp, equal_nan=equal_nan, check_dtype=check_dtype)
        )
    for key, leaf in cand.items():
        if key not in ref:
            leaves.append(LeafReport(key=key, status="unexpected", shape=tuple(leaf.shape), dtype=str(leaf.dtype)))
    return ComparisonReport(leaves=tuple(leaves), rtol=rtol, atol=atol, max_ulp_allowed=max_ulp, skipped=skipped)


def _is_key_array(leaf: Any) -> bool:
    jax = sys.modules.get("jax")
    dtype = getattr(leaf, "dtype", None)
    if jax is None or dtype is None:
        return False
    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:  # a torch dtype: a tensor, never a key
        return False


def _without_rng_state(obj: Any) -> tuple[Any, tuple[str, ...]]:
    """``obj`` with its RNG-state leaves set to ``None`` (dropped by ``flatten``), and their dotted keys.

    ``nnx.RngState`` variables (``RngKey``, ``RngCount``) go by type, as their
    counters are plain ``uint32`` arrays; other leaves go by a PRNG-key dtype,
    and in a pure dict (``nnx.to_pure_dict``) a ``count`` beside a ``key`` of
    that dtype is its stream's counter.
    """
    jax = sys.modules.get("jax")
    if jax is None:  # nothing JAX-made can hold a key
        return obj, ()
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(obj, nnx.Module):
        obj = nnx.state(obj)
    skipped: list[str] = []

    def is_variable(leaf: Any) -> bool:
        return nnx is not None and isinstance(leaf, nnx.Variable)

    flat = [(tuple(jax_key_name(entry) for entry in path), leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(obj, is_leaf=is_variable)[0]]
    streams = {names[:-1] for names, leaf in flat if names[-1:] == ("key",) and _is_key_array(leaf)}

    def is_rng_state(names: tuple[str, ...], leaf: Any) -> bool:
        if is_variable(leaf):
            return isinstance(leaf, nnx.RngState) or _is_key_array(leaf.get_value())
        return _is_key_array(leaf) or (names[-1:] == ("count",) and names[:-1] in streams)

    def drop(path: tuple, leaf: Any) -> Any:
        names = tuple(jax_key_name(entry) for entry in path)
        if is_rng_state(names, leaf):
            skipped.append(".".join(names))
            return None
        return leaf

    if not any(is_rng_state(names, leaf) for names, leaf in flat):
        return obj, ()
    return jax.tree_util.tree_map_with_path(drop, obj, is_leaf=is_variable), tuple(skipped)


def assert_parity(
    torch_obj: Any,
    jax_obj: Any,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    max_ulp: int | None = None,
    equal_nan: bool = True,
    check_dtype: bool = True,
    msg: str | None = None,
) -> ComparisonReport:
    """Like :func:`compare`, but raises ``AssertionError`` with the table on failure.

    Returns the report when everything passes, so callers can record it.
    """
    report = compare(torch_obj, jax_obj, rtol=rtol, atol=atol, max_ulp=max_ulp, equal_nan=equal_nan, check_dtype=check_dtype)
    if not report.passed:
        prefix = f"{msg}\n" if msg else ""
        raise AssertionError(f"{prefix}torch and JAX differ:\n{report.table()}")
    return report


def scaled_error(ours: Any, theirs: Any) -> float:
    """``max |ours - theirs| / max |theirs|`` over one array: the error relative to the tensor's scale.

    The runner's measure of parameter divergence. Unlike an elementwise
    relative error it does not blow up on entries that training drives
    towards zero (a weight of 1e-9 that differs by 1e-12 is no divergence).
    """
    theirs = np.asarray(theirs, np.float64)
    if not theirs.size:
        return 0.0
    scale = float(np.abs(theirs).max())
    err = float(np.abs(np.asarray(ours, np.float64) - theirs).max())
    return err / scale if scale > 0 else err
