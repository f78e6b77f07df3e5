"""``parity port pkg.module:Factory [--kwargs JSON] --input-shape 1,3,32,32 [--dtype] -o twin.py``.

Builds the torch model (``Factory(**kwargs)`` after ``torch.manual_seed``),
writes its twin's source to ``-o``, loads the twin back from that file (so
the file is what gets checked), compares it with the model
(:func:`parity.port.check_port`) and prints the table. Exit 0 when they
match, 1 when they differ beyond tolerance; anything the user gave that
cannot be used (import path, kwargs, shape, a model fx cannot trace or a
node with no mapping) is a :class:`parity.config.ConfigError`, exit 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from parity.config import ConfigError

__all__ = ["add_parser", "run"]


def add_parser(commands) -> argparse.ArgumentParser:
    """Adds the ``port`` subcommand to the ``parity`` CLI's subparsers; its handler is :func:`run`."""
    port = commands.add_parser(
        "port",
        help="write a torch model's jax_impl twin (Python source) and check it against the model",
        description="Trace the torch model with torch.fx, write its jax_impl.nn twin to -o, load the twin from "
        "that file with the model's weights and compare both (eval and train forward, BatchNorm buffers, "
        "gradients, one SGD step). Exit 0 when they match, 1 when they differ, 2 on bad input.",
    )
    port.add_argument("factory", metavar="MODULE:FACTORY", help="import path of the torch model class or factory")
    port.add_argument("--kwargs", default="{}", metavar="JSON", help="keyword arguments of the factory, as JSON")
    port.add_argument("--input-shape", required=True, metavar="N,C,H,W", help="shape of the random check input")
    port.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                      help="dtype of the model and the check (default float32)")
    port.add_argument("--seed", type=int, default=0, help="seed of the model's init and of the check input")
    port.add_argument("-o", "--output", required=True, metavar="FILE", help="where the twin's source is written")
    port.set_defaults(handler=run)
    return port


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--input-shape {text!r}: expected comma-separated integers such as 1,3,32,32") from None
    if not shape or any(size < 1 for size in shape):
        raise ConfigError(f"--input-shape {text!r}: sizes must be positive")
    return shape


def _kwargs(text: str) -> dict:
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"--kwargs is not JSON: {error}") from None
    if not isinstance(kwargs, dict):
        raise ConfigError(f"--kwargs must be a JSON object, got {type(kwargs).__name__}")
    return kwargs


def run(args: argparse.Namespace) -> int:
    """The ``port`` command: 0 the twin matches, 1 it differs; bad input raises ``ConfigError`` (exit 2)."""
    import torch

    from parity.models import import_object
    from parity.numerics import strict_numerics
    from parity.port import PortError, check_port, instantiate, load_twin_class, port_source

    shape, kwargs = _shape(args.input_shape), _kwargs(args.kwargs)
    factory = import_object(args.factory, "factory")
    dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
    with strict_numerics(args.seed, x64=args.dtype == "float64"):
        try:
            model = factory(**kwargs)
        except Exception as error:  # noqa: BLE001 - the user's constructor failing is bad input, not ours
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise ConfigError(f"{args.factory}(**{kwargs}) failed: {type(error).__name__}: {first}") from None
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(f"{args.factory}(**kwargs) returned a {type(model).__name__}, not a torch.nn.Module")
        model = model.to(dtype)
        # The check's own input (check_port draws it the same way): the trace runs on it, so sizes are known.
        example = torch.randn(shape, generator=torch.Generator().manual_seed(args.seed), dtype=dtype)
        try:
            source = port_source(model, example)
        except PortError as error:
            raise ConfigError(str(error)) from None
        output = Path(args.output)
        output.write_text(source)
        twin = instantiate(load_twin_class(output), model)
        try:
            check = check_port(model, twin, example, seed=args.seed)
        except (TypeError, ValueError, RuntimeError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"the model does not run on --input-shape {args.input_shape}: {first}") from None
    print(f"wrote {output} ({type(model).__name__} -> {type(twin).__name__}, {args.dtype})")
    print(check.table())
    return 0 if check.passed else 1
