"""The ``parity`` command line (also ``python -m parity``).

Subcommands are wired only once they work:

- ``parity config validate FILE...``: checks configs; exit 2 on the first bad one.
- ``parity config show [FILE] [key=value ...]``: prints the resolved config
  (every torch default filled in). Without FILE, the default experiment.
- ``parity config list``: the shipped configs, one line each. FILE anywhere
  may be a shipped config's bare name (``lenet_digits``).
- ``parity run [FILE] [key=value ...] [--only torch|jax] [--steps N]``: the
  end-to-end parity run (exit 1 when the two sides diverge beyond tolerance).
- ``parity summary [FILE] [key=value ...]``: the config's model in torch and
  JAX side by side, per layer (output shape, parameter count).
- ``parity port MODULE:FACTORY --input-shape N,C,H,W -o twin.py``: writes the
  torch model's ``jax_impl`` twin and checks it (exit 1 when they differ).
- ``parity compare RUN_A RUN_B [--floor RUN_F64] [--rtol X] [--out DIR]``: two
  recordings (``parity.Recorder``), or two ``parity run`` folders (a ``--only torch``
  run's and a ``--only jax`` run's), compared step by step (exit 1 when they part).

Exit codes (``parity --help`` lists them too):

- 0: parity holds (or the command succeeded);
- 1: the frameworks diverged; the report says where;
- 2: bad input of any kind (config, override, checkpoint, state dict,
  paths), as argparse uses 2 for usage errors: one line naming the file or
  key, never a traceback, nothing written;
- 130: interrupted (SIGINT/SIGTERM): the run folder keeps a report of every
  step done, marked interrupted, and the last complete checkpoint;
- 3: an internal error: one line here, the traceback in the run folder's
  ``error.log`` (or a temporary file when no run folder exists yet).
"""

from __future__ import annotations

import argparse
import atexit
import errno
import logging
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

import yaml

from parity import __version__
from parity.config import ConfigError, load_config
from parity import interrupt
from parity.files import no_space_message

__all__ = ["main", "build_parser", "default_config_path"]

EXIT_OK, EXIT_DIVERGED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

EXIT_CODES_HELP = """exit codes:
  0    parity holds (or the command succeeded)
  1    the frameworks diverged; the report says where
  2    bad input (config, override, checkpoint, state dict, path): one line naming it
  3    internal error: one line; the traceback goes to the run folder's error.log
  130  interrupted (Ctrl-C / SIGTERM): the run folder keeps the report of the steps done"""


def default_config_path() -> Path:
    """``configs/lenet_digits.yaml`` of this checkout: LeNet on the bundled digits."""
    return Path(__file__).resolve().parent.parent / "configs" / "lenet_digits.yaml"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parity",
        description="Train the same experiment in PyTorch and JAX and prove they match.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    config = commands.add_parser("config", help="validate or show experiment configs")
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION")
    validate = config_commands.add_parser("validate", help="check config files; exit 2 on the first invalid one")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(handler=_config_validate)
    show = config_commands.add_parser(
        "show",
        help="print the resolved config (torch defaults filled in)",
        description="Print the resolved config. Overrides are dotted key=value pairs, values parsed as YAML.",
    )
    show.add_argument("file", nargs="?", metavar="FILE", help=f"config file (default: {default_config_path().name})")
    show.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    show.set_defaults(handler=_config_show)
    listing = config_commands.add_parser(
        "list", help="the shipped configs (configs/), each with a one-line description",
        description="List the configs of the checkout's configs/ folder: `parity run NAME` runs one.",
    )
    listing.set_defaults(handler=_config_list)
    config.set_defaults(handler=lambda args: _print_help(config))

    run = commands.add_parser(
        "run",
        help="train a config in torch and JAX side by side and report their divergence",
        description="Train the config's experiment in both frameworks from identical weights on identical "
        "batches; write runs/<name>-<timestamp>/ (report.json, report.md, plots). Exit 0 when the final "
        "parameters agree within train.tolerance, 1 when they do not, 2 on bad input.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("file", nargs="?", metavar="FILE", help=f"config file (default: {default_config_path().name})")
    run.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    run.add_argument("--only", choices=["torch", "jax"], help="train one framework only (time and accuracy)")
    run.add_argument("--steps", type=int, default=None, metavar="N", help="stop after N optimizer steps")
    run.add_argument("--runs-dir", default="runs", metavar="DIR", help="parent folder of the run folder (default runs/)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.add_argument("--resume", metavar="CHECKPOINT",
                     help="continue from a run's checkpoint.pt, in its run folder; without FILE the run uses the "
                     "config the checkpoint records (overrides apply to it)")
    run.add_argument("--allow-config-change", action="store_true",
                     help="with --resume: accept a config that differs from the checkpoint's; both frameworks "
                     "use the new values")
    run.add_argument("--resume-from", choices=["torch", "jax"], default=None,
                     help="both sides continue from this framework's model and optimizer state")
    run.add_argument("--no-compile-cache", action="store_true",
                     help="do not keep compiled JAX steps between runs (default: in $PARITY_CACHE_DIR, else "
                     "~/.cache/parity/jax)")
    hosts = run.add_argument_group(
        "several hosts", "a data-parallel run over hosts: run the same command on each, with its own "
        "--process-id; process 0 writes the report (docs/data_parallel.md)")
    hosts.add_argument("--coordinator", metavar="HOST:PORT",
                       help="process 0's host and a port; it also uses PORT+1 and PORT+2")
    hosts.add_argument("--num-processes", type=int, metavar="N", help="hosts in the run (parallel.processes)")
    hosts.add_argument("--process-id", type=int, metavar="I", help="this host's index, 0..N-1")
    run.set_defaults(handler=_run)

    summary = commands.add_parser(
        "summary",
        help="per-layer output shapes and parameter counts, torch and JAX side by side",
        description="Build the config's model in torch and in JAX (same weights) and print a "
        "torchsummary-style table for both, marking mismatches with '!'.",
    )
    summary.add_argument("file", nargs="?", metavar="FILE", help=f"config file (default: {default_config_path().name})")
    summary.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    summary.add_argument("--batch-size", type=int, default=1, help="batch size of the probe input (default 1)")
    summary.set_defaults(handler=_summary)

    bench = commands.add_parser(
        "bench",
        help="time torch and JAX on the same work; write benchmarks/results/*.json and docs/benchmarks.md",
        description="Run the benchmark scripts of benchmarks/ (each in its own process; each times torch and "
        "JAX in one run) and render docs/benchmarks.md, a table of ratios torch time / JAX time, from their "
        "JSON results. Needs a source checkout.",
    )
    bench.add_argument("names", nargs="*", metavar="NAME",
                       help="benchmarks to run (default: all): " + ", ".join(_bench_names()))
    bench.add_argument("--quick", action="store_true", help="fewer repeats and cases (a smoke run, minutes)")
    bench.add_argument("--results-dir", default=None, metavar="DIR",
                       help="where the JSON results go (default benchmarks/results/)")
    bench.add_argument("--markdown", default=None, metavar="PATH",
                       help="the report to write (default docs/benchmarks.md; '-' prints it)")
    bench.add_argument("--render-only", action="store_true", help="run nothing; render the report from the JSON results")
    bench.add_argument("--no-hugetlb", action="store_true",
                       help="leave glibc's malloc on 4 KiB pages (by default the benchmark processes run with "
                       "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 unless GLIBC_TUNABLES is set)")
    bench.set_defaults(handler=_bench)

    compare = commands.add_parser(
        "compare",
        help="compare two recordings (parity.Recorder folders) step by step and report where they part",
        description="Read two recordings of the same loop (RUN_A: torch's, the reference; RUN_B: the port's), "
        "compare every name at every step both recorded, and write parity run's report (report.json, "
        "report.md, plots). Exit 0 when no name parts beyond --rtol (or, with --floor, beyond 5x torch's own "
        "float32 distance), 1 when one does, 2 on bad input.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("run_a", metavar="RUN_A", help="the reference recording's folder (torch's run), or a "
                         "parity run folder: its recording-torch/")
    compare.add_argument("run_b", metavar="RUN_B", help="the recording to compare with it, or a parity run "
                         "folder: its recording-jax/")
    compare.add_argument("--floor", metavar="RUN_F64",
                         help="a float64 recording of RUN_A's loop: torch's own float32 distance per name "
                         "(default for a run folder RUN_A: its recording-torch-float64/ when it has one)")
    compare.add_argument("--rtol", type=float, default=None, metavar="X",
                         help="tolerance on max |b - a| / max |a| (default: a run folder RUN_A's config rtol, "
                         "else 1e-10 for two float64 recordings and 1e-4 otherwise)")
    compare.add_argument("--out", metavar="DIR",
                         help="where the report goes (default runs/compare-<A>-vs-<B>-<timestamp>/)")
    compare.set_defaults(handler=_compare)

    from parity.port.cli import add_parser as add_port_parser

    add_port_parser(commands)
    return parser


def _bench_names() -> list[str]:
    from parity.bench import BENCHMARKS

    return list(BENCHMARKS)


def _bench(args: argparse.Namespace) -> int:
    from parity import bench

    results_dir = Path(args.results_dir) if args.results_dir else None
    names = args.names or list(bench.BENCHMARKS)
    unknown = [n for n in names if n not in bench.BENCHMARKS]
    if unknown:
        raise ConfigError(f"unknown benchmark(s) {unknown}; choose from {list(bench.BENCHMARKS)}")
    if not args.render_only:
        try:
            bench.run_benchmarks(names, quick=args.quick, results_dir=results_dir, hugetlb=not args.no_hugetlb)
        except FileNotFoundError as error:
            raise ConfigError(str(error)) from None
        except RuntimeError as error:
            print(f"parity: {error}", file=sys.stderr)
            return 1
    text = bench.render_markdown(results_dir)
    if args.markdown == "-":
        print(text)
        return 0
    out = Path(args.markdown) if args.markdown else bench.ROOT / "docs" / "benchmarks.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_BAD_INPUT


def _config_validate(args: argparse.Namespace) -> int:
    for file in args.files:
        load_config(file)
        print(f"ok: {file}")
    return 0


def _config_show(args: argparse.Namespace) -> int:
    config = _load(args)
    sys.stdout.write(yaml.safe_dump(config.to_dict(), sort_keys=False))
    return 0


def _config_list(args: argparse.Namespace) -> int:
    from parity.config.describe import list_configs

    configs = list_configs()
    if not configs:
        raise ConfigError("no shipped configs: this installation has no configs/ folder")
    width = max(len(name) for name, _ in configs)
    for name, description in configs:
        print(f"{name:<{width}}  {description}")
    return 0


def _load(args: argparse.Namespace):
    file, overrides = args.file, list(args.overrides)
    if file is not None and not _names_a_file(args):
        overrides.insert(0, file)  # `parity ... key=value`: the default config, overridden
        file = None
    return load_config(file if file is not None else default_config_path(), overrides)


def _names_a_file(args: argparse.Namespace) -> bool:
    return args.file is not None and not ("=" in args.file and not Path(args.file).exists())


def _resumed_config(args: argparse.Namespace):
    """``--resume CKPT`` without a config file: the config the checkpoint records, with the overrides applied."""
    from parity.checkpoint import read_checkpoint
    from parity.config import apply_overrides, config_from_dict

    overrides = ([args.file] if args.file is not None else []) + list(args.overrides)
    raw = read_checkpoint(args.resume).config
    try:
        return config_from_dict(apply_overrides(raw, overrides))
    except ConfigError as error:
        raise ConfigError(f"the config recorded in {args.resume}: {error}") from None


def _run(args: argparse.Namespace) -> int:
    from parity.files import check_writable
    from parity.progress import Phases

    phases = Phases(enabled=not args.no_progress)
    hosts = _hosts(args)
    if hosts is not None:  # the layout the flags name, unless the overrides name it themselves
        given = {item.split("=", 1)[0] for item in [args.file or "", *args.overrides]}
        args.overrides = [*args.overrides, *(f"{k}={v}" for k, v in (("parallel.processes", hosts.num_processes),
                                                                     ("parallel.jax_mode", "sharded"))
                                             if k not in given)]
    config = _resumed_config(args) if args.resume is not None and not _names_a_file(args) else _load(args)
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {args.steps}")
    if args.allow_config_change and args.resume is None:
        raise ConfigError("--allow-config-change only applies with --resume")
    runs_dir = Path(args.runs_dir)
    try:
        check_writable(runs_dir)
    except OSError as error:
        raise ConfigError(f"runs folder {runs_dir} is not writable: {error.strerror or error}") from None
    phases("importing torch and JAX")
    from parity.compile_cache import compilation_cache, default_cache_dir
    from parity.experiment import DivergenceError, run_experiment
    from parity.report import render_markdown

    try:
        with compilation_cache(None if args.no_compile_cache else default_cache_dir()):
            report = run_experiment(config, only=args.only, max_steps=args.steps, runs_dir=runs_dir,
                                    progress=not args.no_progress, resume=args.resume,
                                    resume_from=args.resume_from, allow_config_change=args.allow_config_change,
                                    phases=phases, hosts=hosts)
    except DivergenceError as error:
        where = getattr(error, "parity_run_dir", None)
        print(f"parity: diverged: {error}" + (f" (report in {where})" if where else ""), file=sys.stderr)
        return EXIT_DIVERGED
    if hosts is not None and hosts.process_id != 0:
        print(report.message, flush=True)
        return EXIT_OK
    try:
        print(render_markdown(report))
        print(f"run folder: {report.run_dir}", flush=True)
    except BrokenPipeError:  # `parity run | head`: the reader left; the verdict still decides the exit code
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK if report.passed else EXIT_DIVERGED


def _compare(args: argparse.Namespace) -> int:
    from parity.compare_recordings import compare_runs, render_recordings_markdown, write_recordings_report
    from parity.files import make_run_folder

    if args.rtol is not None and not args.rtol >= 0:
        raise ConfigError(f"--rtol must be >= 0, got {args.rtol}")
    report = compare_runs(args.run_a, args.run_b, floor=args.floor, rtol=args.rtol)  # bad input: nothing written
    names = (Path(args.run_a).resolve().name, Path(args.run_b).resolve().name)
    out = Path(args.out) if args.out else make_run_folder("runs", f"compare-{names[0]}-vs-{names[1]}")
    write_recordings_report(report, out)
    try:
        print(render_recordings_markdown(report))
        print(f"report folder: {out}", flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK if report.passed else EXIT_DIVERGED


def _hosts(args: argparse.Namespace):
    """The :class:`parity.parallel.Hosts` that ``--coordinator``, ``--num-processes`` and ``--process-id`` name."""
    flags = (args.coordinator, args.num_processes, args.process_id)
    if all(flag is None for flag in flags):
        return None
    if any(flag is None for flag in flags):
        raise ConfigError("--coordinator, --num-processes and --process-id go together")
    from parity.parallel import Hosts

    address, _, port = args.coordinator.rpartition(":")
    if not address or not port.isdigit():
        raise ConfigError(f"--coordinator must be HOST:PORT, got {args.coordinator!r}")
    try:
        return Hosts(address, int(port), args.num_processes, args.process_id)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _summary(args: argparse.Namespace) -> int:
    from parity.models import build_models, input_shape, summary

    config = _load(args)
    torch_model, jax_model = build_models(config.model, seed=config.train.seed)
    print(f"{config.name}: {config.model.name}")
    print(summary(torch_model, jax_model, (args.batch_size, *input_shape(config))))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse stops filling `overrides` at the first option: `parity run FILE --steps 5 key=value` leaves
    # key=value over; overrides may stand anywhere after the command.
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handler = getattr(args, "handler", None)
    if handler is None:
        return _print_help(parser)
    try:
        with interrupt.deferred():
            return handler(args)
    except ConfigError as error:
        print(f"parity: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as error:
        where = getattr(error, "parity_run_dir", None)
        print("parity: interrupted" + (f"; the report of the steps done is in {where}" if where else ""),
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as error:
        message = no_space_message(error) or _path_error(error)
        if message is None:
            return _internal_error(error)
        print(f"parity: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:  # noqa: BLE001 - the CLI's last line of defence: one line, traceback to a file
        return _internal_error(error)



def _path_error(error: OSError) -> str | None:
    """One line for an OSError about a path the user gave (permission, read-only, missing folder)."""
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
        return f"{error.strerror}: {error.filename}" if error.filename else None
    return None


def _internal_error(error: BaseException) -> int:
    """One line on stderr; the full traceback in the run folder's ``error.log`` (or a temporary file)."""
    text = "".join(traceback.format_exception(error))
    folder = getattr(error, "parity_run_dir", None)
    try:
        if folder is not None:
            log = Path(folder) / "error.log"
            log.write_text(text)
        else:
            fd, name = tempfile.mkstemp(prefix="parity-error-", suffix=".log")
            with os.fdopen(fd, "w") as file:
                file.write(text)
            log = Path(name)
        where = f"traceback in {log}"
    except OSError:
        where = "the traceback could not be written"
    first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    print(f"parity: internal error: {type(error).__name__}: {first} ({where})", file=sys.stderr)
    return EXIT_INTERNAL


def console() -> None:
    """The ``parity`` console script and ``python -m parity``: :func:`main`, then the process ends.

    A finished command skips the interpreter's teardown, which only frees memory the process gives back
    anyway and takes over a second once torch and XLA are loaded: the last exit handler (registered here,
    before any import of the command registers its own, so that every other handler runs first) flushes
    the output streams and logging, then calls ``os._exit`` with the command's exit code. An exception
    that escapes :func:`main` (``SystemExit`` from argparse's ``--help`` or a usage error) ends the usual way.
    """
    exit_code: list[int] = []

    def end_now() -> None:
        if not exit_code:
            return
        logging.shutdown()  # its own exit handler may be registered before this one: flushed here either way
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`parity run | head`) or a closed stream
                pass
        os._exit(exit_code[0])

    atexit.register(end_now)
    exit_code.append(main())
    sys.exit(exit_code[0])


if __name__ == "__main__":  # pragma: no cover
    console()
