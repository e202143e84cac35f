"""Every command on every trace, each first claim checked against the raw events.

    python benchmarks/sweep.py run OUT TRACE... [--jobs 2] [--pair A,B ...]
    python benchmarks/sweep.py check OUT [--sources sources.json] [--markdown table.md]

`run` keeps each command's text and `--format json` output under OUT (one folder per trace);
`check` reads them back, takes the first claim of each command (its first finding, else its
first row or verdict) and checks it with sweep_raw.py, which reads the trace itself and never
imports tracelab. Verdicts: true, misleading, false, unsupported (tracelab refused the input
or had nothing to say where the file holds the answer).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import sweep_checks  # noqa: E402

COMMANDS = ("breakdown", "steps", "idle", "whatif", "roofline", "memory")


def slug(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json").removesuffix(".sqlite")


CHECKOUT = {"root": Path(__file__).resolve().parent.parent}  # whose tracelab runs (--repo)


def _tracelab(args: list[str], out: Path, stem: str) -> None:
    if CHECKOUT.get("in_process"):
        return _in_process(args, out, stem)
    # Run from the checkout's root: `python -m` puts the working folder first on the path.
    proc = subprocess.run([sys.executable, "-m", "tracelab", *args], capture_output=True, text=True, timeout=900,
                          cwd=CHECKOUT["root"])
    (out / f"{stem}.out").write_text(proc.stdout)
    (out / f"{stem}.err").write_text(proc.stderr)
    (out / f"{stem}.rc").write_text(str(proc.returncode))


def _in_process(args: list[str], out: Path, stem: str) -> None:
    """The command through tracelab's own entry point in this process (--in-process: the imports
    once per sweep, not once per command; a loaded machine spent most of each command on them).
    Its output, errors and exit status are kept as a subprocess's would be; one job at a time."""
    import contextlib
    import io
    import os

    from tracelab import cli

    argv, environ = sys.argv, dict(os.environ)
    stdout, stderr = io.StringIO(), io.StringIO()
    sys.argv = ["tracelab", *args]
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            cli.main()
        rc = 0
    except SystemExit as done:
        rc = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except Exception:  # a bug in tracelab: its traceback is the report, as a subprocess's would be
        import traceback

        stderr.write(traceback.format_exc())
        rc = 1
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
    (out / f"{stem}.out").write_text(stdout.getvalue())
    (out / f"{stem}.err").write_text(stderr.getvalue())
    (out / f"{stem}.rc").write_text(str(rc))


def run_trace(trace: Path, out_root: Path, commands: tuple[str, ...] = (*COMMANDS, "report")) -> None:
    out = out_root / slug(trace)
    out.mkdir(parents=True, exist_ok=True)
    trace = trace.resolve()
    (out / "trace.txt").write_text(str(trace))
    for command in (c for c in COMMANDS if c in commands):
        _tracelab([command, "--format", "json", str(trace)], out, f"{command}.json")
        _tracelab([command, str(trace)], out, f"{command}.text")
    if "report" in commands:
        _tracelab(["report", str(trace), "-o", str(out.resolve() / "report.html"), "--force"], out, "report.text")


def run_pair(pair: str, out_root: Path) -> None:
    first, second = (Path(p).resolve() for p in pair.split(","))
    out = out_root / f"compare__{slug(first)}__{slug(second)}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace.txt").write_text(f"{first}\n{second}")
    _tracelab(["compare", "--format", "json", str(first), str(second)], out, "compare.json")
    _tracelab(["compare", str(first), str(second)], out, "compare.text")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run")
    run.add_argument("out", type=Path)
    run.add_argument("traces", type=Path, nargs="*")
    run.add_argument("--jobs", type=int, default=2)
    run.add_argument("--pair", action="append", default=[], help="two traces for compare: A,B")
    run.add_argument("--commands", default=",".join((*COMMANDS, "report")), help="which to run, comma-separated")
    run.add_argument("--repo", type=Path, default=CHECKOUT["root"], help="the checkout to run (default: this one)")
    run.add_argument("--in-process", action="store_true",
                     help="run each command in this process, the --repo checkout's tracelab imported once (--jobs 1)")
    check = sub.add_parser("check")
    check.add_argument("out", type=Path)
    check.add_argument("--sources", type=Path, help="JSON: trace path -> {source, licence, device}")
    check.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.what == "run":
        CHECKOUT["root"] = args.repo.resolve()
        if args.in_process:
            CHECKOUT["in_process"] = True
            sys.path.insert(0, str(CHECKOUT["root"]))
            args.jobs = 1
        with ThreadPoolExecutor(args.jobs) as pool:
            jobs = [pool.submit(run_trace, t, args.out, tuple(args.commands.split(","))) for t in args.traces]
            jobs += [pool.submit(run_pair, p, args.out) for p in args.pair]
            for job in jobs:
                job.result()
        return
    rows = sweep_checks.check_all(args.out)
    sources = json.loads(args.sources.read_text()) if args.sources else {}
    (args.out / "verdicts.json").write_text(json.dumps(rows, indent=1))
    table = sweep_checks.markdown(rows, sources)
    if args.markdown:
        args.markdown.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
