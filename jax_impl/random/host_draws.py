"""A jitted function whose torch-stream draws are made on the host before each call and passed in.

Inside ``jax.jit`` a dropout mask with torch's numbers is an ordered host
callback (:meth:`jax_impl.random.Generator.staged_bernoulli`): the compiled
function stops at each dropout layer, calls back into Python, and waits for
the draw. Ordered effects also take every call off jax's C++ dispatch path
(a token threads through the calls). A training step draws the same masks
at every call (each dropout layer's shape and probability, in program
order), so :func:`jit_with_host_draws` finds that list once per shape of
the batch, in the trace jit makes of the function anyway, and then at each
call draws the masks on the host, in that order, and hands them to a
compiled function that holds no callback.

The stream is torch's either way: the masks are the same draws in the same
order from the same generators, and a host draw made between two calls (a
DataLoader's seed at an epoch's start) comes between them, as in torch.

A generator may hand a draw over in parts of its own (``fed_form``,
``feed``, ``from_fed``): :class:`jax_impl.random.Generator` hands a step's
small standard normals over as the two halves of their transform, which the
compiled function joins, so that the transform, dispatched before the
call, need not be awaited on the host.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Draw", "intercept", "jit_with_host_draws"]

_STATE = threading.local()  # .mode: None, ("record", list) or ("feed", iterator of (spec, array))


class Draw(NamedTuple):
    """One draw a traced function makes from a generator: ``generator.<method>(*args)`` of ``shape`` and
    ``dtype`` (``("bernoulli", (shape, p))``, ``("normal", (shape, mean, std, dtype))``, ...)."""

    method: str
    args: tuple[Any, ...]
    shape: tuple[int, ...]
    dtype: str

    def run(self, generator: Any, *, synced: bool = True) -> Any:
        """The draw on the host. ``synced=False`` skips the wait for staged draws (a callback's own thread)."""
        method = getattr(type(generator), self.method)
        return (method if synced else method.__wrapped__)(generator, *self.args)

    def describe(self) -> str:
        return f"{self.method}{self.args}"


def _fed_form(generator: Any, draw: Draw) -> Any:
    """How ``draw`` is handed to the compiled function: ``None`` for the array itself, else the shapes of the
    parts the generator hands over instead (``generator.fed_form``), which the traced function joins back."""
    form = getattr(generator, "fed_form", None)
    return None if form is None else form(draw)


def _draw_plan(plan: Sequence[tuple[Any, Draw]], forms: Sequence[Any]) -> tuple[Any, ...]:
    """The plan's draws on the host, in order, each as the compiled function takes it (``forms``: a draw with
    a form of its own comes from ``generator.feed``). Consecutive bernoulli draws of one generator are drawn
    together (:meth:`~jax_impl.random.Generator.bernoulli_many`): the same masks, one engine call."""
    arrays: list[Any] = []
    i = 0
    while i < len(plan):
        generator, draw = plan[i]
        j = i + 1
        if draw.method == "bernoulli" and hasattr(generator, "bernoulli_many"):
            while j < len(plan) and plan[j][0] is generator and plan[j][1].method == "bernoulli":
                j += 1
        if j - i > 1:
            masks = generator.bernoulli_many([d.args for _, d in plan[i:j]])
            arrays += [np.asarray(m).astype(d.dtype, copy=False) for m, (_, d) in zip(masks, plan[i:j])]
        elif forms[i] is not None:
            arrays.append(generator.feed(draw))  # a step's noise, in parts the step joins (maybe still computing)
        else:
            arrays.append(np.asarray(draw.run(generator)).astype(draw.dtype, copy=False))
        i = j
    return tuple(arrays)


@contextlib.contextmanager
def _mode(mode: tuple[str, Any]) -> Iterator[None]:
    outer = getattr(_STATE, "mode", None)
    _STATE.mode = mode
    try:
        yield
    finally:
        _STATE.mode = outer


def intercept(generator: Any, draw: Draw) -> Any | None:
    """The array a staged draw of ``generator`` becomes while a function is being traced by
    :func:`jit_with_host_draws` (``None`` outside one: the draw stays a host callback).

    Recording (the abstract trace that finds the draws) notes ``(generator,
    draw)`` and returns a placeholder; feeding (the compiled function's
    trace) returns the next argument, which must be that draw, joined from
    its parts where the generator hands it over in parts (``from_fed``).
    """
    mode = getattr(_STATE, "mode", None)
    if mode is None:
        return None
    import jax.numpy as jnp

    kind, store = mode
    if kind == "record":
        store.append((generator, draw))
        return jnp.zeros(draw.shape, draw.dtype)
    try:
        (expected, array) = next(store)
    except StopIteration:
        expected, array = None, None
    if expected is None or expected[0] is not generator or expected[1] != draw:
        raise RuntimeError(f"a traced draw {draw.describe()} is not the one recorded for this call "
                           f"({expected and expected[1].describe()}): the function's draws depend on more than "
                           "the shapes of its arguments")
    return array if _fed_form(generator, draw) is None else generator.from_fed(draw, array)


def _signature(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """The tree and the shapes and dtypes of ``args``; ``None`` if one is a tracer (a trace around the call)."""
    import jax

    leaves, tree = jax.tree.flatten(args)
    if any(isinstance(a, jax.core.Tracer) for a in leaves):
        return None
    return tree, tuple((getattr(a, "shape", None), getattr(a, "dtype", type(a))) for a in leaves)


def jit_with_host_draws(fn: Callable[..., Any], *, donate_argnums: Sequence[int] = (),
                        key_argnums: Sequence[int] = ()) -> Callable[..., Any]:
    """``jax.jit(fn, donate_argnums=...)`` with the torch-stream draws of ``fn`` made on the host.

    Args:
      fn: a traceable function whose draws (``jax_impl.nn`` dropout with
        torch's masks, :mod:`jax_impl.random.staged`'s normal, uniform,
        integer and categorical noise) depend only on the shapes of the arguments at
        ``key_argnums`` (a train step's batch), not on their values.
      donate_argnums: as ``jax.jit``'s.
      key_argnums: the arguments whose shapes and dtypes decide which draws
        a call makes; the list is found by tracing the function once per
        new shape (the trace a plain ``jax.jit`` makes, reused when there
        is no draw).

    Returns:
      ``call(*args)``: draws ``fn``'s masks from their generators, in
      program order, then runs the compiled ``fn`` on them. A function
      without draws runs as plain ``jax.jit`` would. ``call.lower(*args)``
      lowers it as ``jax.jit(...).lower`` does (e.g. for
      ``.compile().memory_analysis()``), drawing nothing. Called inside
      another trace (``jax.jit`` or ``jax.vmap`` around it), the draws stay
      ordered host callbacks of that trace, as under a plain ``jax.jit``.
    """
    import jax

    def named(function: Callable[..., Any]) -> Callable[..., Any]:
        # jit names its computations (and JAX's persistent-cache entries) after the function it is given.
        function.__name__ = getattr(fn, "__name__", function.__name__)
        function.__qualname__ = getattr(fn, "__qualname__", function.__qualname__)
        return function

    def fed_by(plan: tuple[Any, ...]) -> Callable[..., Any]:
        def fed(draws: tuple[Any, ...], *args: Any) -> Any:
            remaining = iter(zip(plan, draws))
            with _mode(("feed", remaining)):
                out = fn(*args)
            if next(remaining, None) is not None:  # drawn on the host, never used: torch's stream would differ
                raise RuntimeError("the function made fewer traced draws than recorded for this call: "
                                   "its draws depend on more than the shapes of its arguments")
            return out

        return named(fed)

    def private() -> Callable[..., Any]:
        def call_fn(*args: Any) -> Any:
            return fn(*args)

        return named(call_fn)

    # Private functions, each its own jit cache: the recording trace below is jit's own first trace of
    # `plain` (kept when no draw was found), so no jit of `fn` elsewhere, nor `inside`, can be served a
    # trace whose masks are placeholders.
    plain = jax.jit(private(), donate_argnums=tuple(donate_argnums))
    # Called inside another trace (a jit or vmap around the step), the masks stay ordered callbacks there.
    inside = jax.jit(private(), donate_argnums=tuple(donate_argnums))
    # batch signature -> (plan, each draw's fed form, compiled)
    entries: dict[Any, tuple[tuple[Any, ...], tuple[Any, ...], Callable[..., Any]]] = {}

    def entry(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...], Callable[..., Any]]:
        key = _signature([args[i] for i in key_argnums])
        if key is None:
            return (), (), inside
        found = entries.get(key)
        if found is None:
            recorded: list[tuple[Any, Draw]] = []
            with _mode(("record", recorded)):
                plain.trace(*args)
            plan = tuple(recorded)
            forms = tuple(_fed_form(generator, draw) for generator, draw in plan)
            found = entries[key] = (plan, forms, plain if not plan else jax.jit(
                fed_by(plan), donate_argnums=tuple(i + 1 for i in donate_argnums)))
        return found

    def call(*args: Any) -> Any:
        plan, forms, run = entry(args)
        if not plan:
            return run(*args)
        return run(_draw_plan(plan, forms), *args)

    def lower(*args: Any) -> Any:
        """``jax.jit(...).lower`` of the compiled function for these arguments (its draws as abstract
        arguments: nothing is drawn)."""
        plan, forms, run = entry(args)
        if not plan:
            return run.lower(*args)
        return run.lower(tuple(jax.ShapeDtypeStruct(draw.shape, draw.dtype) if form is None else form
                               for (_, draw), form in zip(plan, forms)), *args)

    call.lower = lower  # type: ignore[attr-defined]
    return call
