"""The command line: ``portcheck ORIGINAL PORT --cases CASES [options]`` (also ``python -m portcheck``).

Exit codes: **0** every case equal (under the chosen mode) and both sides deterministic; **1** a
mismatch; **2** a usage error (a name that does not resolve, a module that fails to import, a
missing dependency, an empty case list, ``--only`` naming no case, an unwritable ``--out``); **3**
a case errored (a callable raised, the reference is broken), crashed (a signal) or timed out.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ._version import __version__
from .names import UsageError, load_cases, resolve
from .report import EXIT_ERROR, EXIT_USAGE


def _ulp(text: str) -> tuple[str, int]:
    name, sep, n = text.partition("=")
    if not sep or not n.strip().isdigit():
        raise argparse.ArgumentTypeError(f"--ulp takes DTYPE=N (e.g. bfloat16=1), got {text!r}")
    return name.strip(), int(n)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("original", help="MODULE:NAME of the original callable")
    p.add_argument("port", help="MODULE:NAME of the port")
    p.add_argument("--cases", required=True, help="MODULE:NAME of a list of cases or a function returning one")
    p.add_argument("--device", default="cpu", help="cpu (Triton's interpreter with portcheck's repairs) or cuda")
    p.add_argument("--reference", help="MODULE:NAME of a float64 reference: adds ulp histograms")
    p.add_argument("--out", help="directory for report.md, report.json and report.xml (JUnit)")
    p.add_argument("--junit", help="write JUnit XML to this file")
    p.add_argument("--dump", metavar="DIR", help="save each failing case's inputs and outputs (torch.save) here")
    p.add_argument("--only", action="append", help="run only the case of this name (repeatable)")
    p.add_argument("--no-code", action="store_true", help="skip the generated-code comparison")
    p.add_argument("--timing", action="store_true", help="time both (CUDA only; in this process)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--timeout", type=float, help="seconds a case may take before its worker is killed")
    p.add_argument("--no-isolate", action="store_true", help="check the cases in this process (a crash ends the run)")
    p.add_argument("--nan-equal", action="store_true", help="any NaN equals any NaN (payloads canonicalised)")
    p.add_argument("--zeros-equal", action="store_true", help="-0 equals +0")
    p.add_argument("--ulp", type=_ulp, action="append", metavar="DTYPE=N", help="an ulp budget for a dtype")
    p.add_argument("--no-farther", action="store_true",
                   help="accept a port element no farther (ulps) from --reference than the original's")  # fmt: skip
    p.add_argument("--interpreter-as-shipped", action="store_true",
                   help="--device cpu without portcheck's repairs (Triton's interpreter as shipped)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _check_out(path: str | None, what: str) -> None:
    """Fail early (exit 2) on an output place that cannot be written."""
    if not path:
        return
    target = Path(path)
    try:
        if what == "--junit":
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "a"):
                pass
        else:
            target.mkdir(parents=True, exist_ok=True)
            probe = target / ".portcheck-write-test"
            probe.write_text("")
            probe.unlink()
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot write there ({e.strerror or e})") from e


def run_args(args) -> int:
    """Run the check ``args`` (the parsed arguments) describe; the exit code."""
    from . import isolate
    from .compare import Mode

    isolate.quiet_warnings()
    from .runner import progress_printer, run

    try:
        if args.device == "cpu" and os.environ.get("TRITON_INTERPRET"):
            # portcheck interprets CPU launches itself; kernels defined under the variable would be
            # interpreter objects that the sm_90 table cannot compile (workers inherit this)
            os.environ.pop("TRITON_INTERPRET")
            print("portcheck: TRITON_INTERPRET ignored: --device cpu runs the kernels in the interpreter itself",
                  file=sys.stderr)  # fmt: skip
        if args.jobs < 1:
            raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
        if args.timing and (args.jobs > 1 or args.timeout):
            raise UsageError("--timing runs in this process: not with --jobs > 1 or --timeout")
        if args.no_isolate and (args.jobs > 1 or args.timeout):
            raise UsageError("--no-isolate checks in this process: not with --jobs > 1 or --timeout")
        if args.no_farther and not args.reference:
            raise UsageError("--no-farther needs --reference")
        mode = Mode.make(args.nan_equal, args.zeros_equal, dict(args.ulp or []), args.no_farther)
        for path, what in ((args.out, "--out"), (args.junit, "--junit"), (args.dump, "--dump")):
            _check_out(path, what)
        original, port = resolve(args.original, "ORIGINAL"), resolve(args.port, "PORT")
        reference = resolve(args.reference, "--reference") if args.reference else None
        cases = load_cases(args.cases)
        indices = list(range(len(cases)))
        if args.only:
            indices = [i for i, c in enumerate(cases) if c.name in args.only]
            if not indices:
                raise UsageError(f"--only {args.only}: no such case in {args.cases}")
        picked = [cases[i] for i in indices]
        progress = None if args.quiet else progress_printer(len(picked))
        names = (args.original, args.port, args.cases)
        common = {"reference": reference, "code": not args.no_code, "mode": mode, "progress": progress,
                  "interpret_repairs": not args.interpreter_as_shipped}  # fmt: skip
        if args.timing or args.no_isolate:
            report = run(original, port, picked, args.device, timing=args.timing, names=names, **common)
            if args.dump:
                from .runner import dump_case

                for c, row in zip(picked, report.cases):
                    if not row["ok"]:
                        row["dump"] = dump_case(args.dump, c, args.device, original, port)
        else:
            common["reference"] = args.reference
            report = isolate.run_isolated(*names, device=args.device, jobs=args.jobs, timeout=args.timeout,
                                          indices=indices, dump=args.dump, case_list=cases, **common)  # fmt: skip
    except (UsageError, ValueError, TypeError) as e:
        print(f"portcheck: {e}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as e:  # a worker that could not start (it died importing the names)
        print(f"portcheck: {e}", file=sys.stderr)
        return EXIT_ERROR
    missing = _missing_dependency(report)
    text = report.to_markdown()
    print(text)
    try:
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "report.md").write_text(text)
            (out / "report.json").write_text(report.to_json() + "\n")
            (out / "report.xml").write_text(report.to_junit())
            print(f"wrote {out / 'report.md'}, {out / 'report.json'} and {out / 'report.xml'}")
        if args.junit:
            Path(args.junit).write_text(report.to_junit())
            print(f"wrote {args.junit}")
    except OSError as e:
        print(f"portcheck: could not write the report: {e}", file=sys.stderr)
        return EXIT_USAGE
    if missing:
        print(f"portcheck: every case failed to import a dependency: {missing}", file=sys.stderr)
        return EXIT_USAGE
    return report.exit_code


def _missing_dependency(report) -> str | None:
    """The ImportError every case raised, if every case raised one (a missing dependency, not a
    defect of one case: a usage error)."""
    rows = report.cases
    if rows and all(r.get("error_type") in ("ImportError", "ModuleNotFoundError") for r in rows):
        return rows[0]["error"]
    return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="portcheck",
        description="Check a port against its original, bit for bit, over a case matrix.",
        epilog="exit codes: 0 equal, 1 mismatch, 2 usage error, 3 a case errored, crashed or timed out",
    )
    p.add_argument("--version", action="version", version=f"portcheck {__version__}")
    add_arguments(p)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as ``python -m`` does: modules of the current directory resolve
    try:
        return run_args(args)
    except KeyboardInterrupt:
        print("portcheck: interrupted", file=sys.stderr)
        return EXIT_ERROR
