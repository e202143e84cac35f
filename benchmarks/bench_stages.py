"""CPU seconds per stage of one tracelab command, beside the floor of reading its traces.

    python benchmarks/bench_stages.py TRACE_OR_FOLDER [--ranks N] [--command report] [--repo DIR] [-- EXTRA ARGS]

With --ranks N, N rank files of one job are made first from the trace (benchmarks/make_ranks.py,
under bench-out/, kept for the next run). The command then runs in a fresh child process,
in-process and with one worker (every rank parsed and reduced in that process, one after the
other), the Parquet cache off, each stage's function wrapped to count its CPU time (process
time, exclusive: a stage inside another counts only for itself):

    imports     tracelab.cli and every module of tracelab, pandas, numpy (the start-up path
                measures itself: python -X importtime -m tracelab.cli --help)
    gunzip      the trace's bytes (limits.read_trace_bytes)
    decode      msgspec's split of the top level, traceEvents as raw values (_kineto_json.decode;
                a trace cut into runs from its bytes has none: _kineto_json.read_events)
    pick        the chosen categories' events into columns (_kineto_json.pick, read_events)
    columns     the GPU rows' columns, launch index, CUDA-graph replays (rest of chrome.read)
    shapes      FLOPs, bytes and dtype from the operators' shapes (chrome._work)
    scopes      scopes and steps of each row (chrome._scopes, chrome._gpu_steps)
    host        the host frame and launch columns (parsers/_host.py)
    frame       the events frame: coerce, sort, validate (chrome._frame)
    classify    kernel and op_class (classify.classified)
    digest:NAME each per-rank digest the command asks of load_many (reduce), by name
    replay      whatif's replays (reports/whatif/replay.py, as analyse calls it)
    whatif      the rest of whatif's analysis: join, windows, critical paths, scenarios
    render      everything else: combining the ranks, the analyses and the output

The floor is the least any msgspec reader pays: gunzip plus msgspec's split of `traceEvents`
into raw values, measured on the same files in the same process, gunzipped by the stdlib's
zlib (the / floor column's base, whatever the checkout uses); where the optional isal is
installed, the floor with its gunzip is printed beside it (a checkout that gunzips by isal,
see `gunzip by`, would be ~0.3x of the zlib floor lower against that one). Prints a markdown table
(CPU seconds in all, per rank, per rank over the floor) and the process's peak RSS and the
1-minute load average: on a shared machine CPU time is the figure, wall time is not. --repo
measures another checkout the same way (e.g. `git worktree add /tmp/base OLD`): run both in one
session, since the load moves CPU figures too.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DEFAULT_SRC = SHARED / "traces/hta/trace_diff/control/control.json.gz"

# stage -> (module, attribute) wrapped; the first listed wins when one function is reached twice
STAGES = [
    ("gunzip", "tracelab.core.limits", "read_trace_bytes"),
    ("decode", "tracelab.parsers._kineto_json", "decode"),
    ("pick", "tracelab.parsers._kineto_json", "pick"),
    ("pick", "tracelab.parsers._kineto_json", "read_events"),
    ("shapes", "tracelab.parsers.chrome", "_work"),
    ("scopes", "tracelab.parsers.chrome", "_scopes"),
    ("scopes", "tracelab.parsers.chrome", "_gpu_steps"),
    ("host", "tracelab.parsers._host", "kineto_host"),
    ("host", "tracelab.parsers._host", "launch_columns"),
    ("frame", "tracelab.parsers.chrome", "_frame"),
    ("columns", "tracelab.parsers.chrome", "read"),
    ("cache", "tracelab.ingest.cache", "get"),
    ("cache", "tracelab.ingest.cache", "put"),
    ("classify", "tracelab.core.classify", "classified"),
    ("replay", "tracelab.reports.whatif.analyse", "replay"),
    ("whatif", "tracelab.reports.whatif.analyse", "whatif"),
]
IMPORTS = ["pandas", "numpy", "msgspec", "tracelab.cli", "tracelab.parsers.chrome", "tracelab.parsers.nsys",
           "tracelab.parsers.hatchet", "tracelab.ingest.inputs"]


class Clock:
    """Exclusive CPU time per stage: a stack of open stages, each charged its own time only."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.stack: list[list] = []  # [stage, started, time charged to stages inside it]

    def wrap(self, stage: str, fn):
        def timed(*args, **kwargs):
            self.stack.append([stage, time.process_time(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, started, inner = self.stack.pop()
                spent = time.process_time() - started
                self.seconds[name] = self.seconds.get(name, 0.0) + spent - inner
                self.calls[name] = self.calls.get(name, 0) + 1
                if self.stack:
                    self.stack[-1][2] += spent
        timed.__wrapped__ = fn
        for attr in ("with_meta", "with_host"):
            if hasattr(fn, attr):
                setattr(timed, attr, getattr(fn, attr))
        return timed


def _install(clock: Clock) -> None:
    import importlib

    for stage, module, attr in STAGES:
        mod = importlib.import_module(module)
        if not hasattr(mod, attr):  # an older or newer tree without this function
            continue
        setattr(mod, attr, clock.wrap(stage, getattr(mod, attr)))
    # the parser modules import these names into their own namespace: wrap them there too
    from tracelab.parsers import _kineto_json, chrome

    for name in ("decode", "pick", "read_events"):
        if hasattr(_kineto_json, name):
            setattr(chrome, name, getattr(_kineto_json, name))
    loader = _loader()
    if hasattr(loader, "_reduced"):  # before issue 31's layout: fn(events[, meta[, host]])
        reduced = loader._reduced

        def digest(fn, events, p):
            inner = getattr(fn, "func", fn)  # functools.partial
            name = getattr(inner, "__name__", type(inner).__name__)
            return clock.wrap(f"digest:{name}", reduced)(fn, events, p)
        loader._reduced = digest
        return
    # each per-rank digest by its name in `reduce`: load_many's, and parse_files' (the session's door)
    for name in ("load_many", "parse_files"):
        if hasattr(loader, name):
            setattr(loader, name, _digests_timed(clock, getattr(loader, name)))


def _digests_timed(clock: Clock, fn):
    def timed(*args, reduce=None, **kwargs):
        reduce = {n: clock.wrap(f"digest:{n}", f) for n, f in (reduce or {}).items()} or None
        return fn(*args, reduce=reduce, **kwargs)
    return timed


def _loader():
    """tracelab's loading module (tracelab/loading.py; tracelab/load.py before issue 31)."""
    import importlib

    try:
        return importlib.import_module("tracelab.ingest.loading")
    except ImportError:
        return importlib.import_module("tracelab.load")


def _inflate(path: Path, inflater) -> bytes:
    """The file's bytes, gunzipped (every member) by `inflater` (zlib, or isal_zlib), as tracelab reads
    them; one member's inflated bytes as they come (until 2026-11-26 they were copied twice, into a
    bytearray and back: ~0.035 s, a floor ~40% too high for a 35 MB trace)."""
    return inflated(path.read_bytes(), inflater)


def inflated(raw: bytes, inflater) -> bytes:
    """`raw` gunzipped by `inflater`, every member (make_ranks.py writes several: zlib.decompress
    and isal_zlib.decompress stop after the first); `raw` itself where it is no gzip."""
    import zlib

    if raw[:2] != b"\x1f\x8b":
        return raw
    members = []
    while raw:
        inflate = inflater.decompressobj(16 + zlib.MAX_WBITS)
        members.append(inflate.decompress(raw))
        raw = inflate.unused_data
    return members[0] if len(members) == 1 else b"".join(members)


def _floor_s(files: list[Path], inflater) -> float:
    """gunzip (by `inflater`) + msgspec's raw split of traceEvents, summed over the files (least of 3 each)."""
    import msgspec

    split = msgspec.defstruct("Split", [("traceEvents", list[msgspec.Raw])])
    total = 0.0
    for f in files:
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            msgspec.json.decode(_inflate(f, inflater), type=split)
            best = min(best, time.process_time() - start)
        total += best
    return total


def use_checkout(repo: Path) -> None:
    """Import tracelab from `repo` (this checkout, or another one's: an older commit's worktree),
    its subpackages too: an editable install maps tracelab.parsers and tracelab.reports to its
    own checkout's folders, whatever sys.path says, so the mapping is pointed at `repo`."""
    repo = repo.resolve()
    sys.path.insert(0, str(repo))
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if isinstance(mapping, dict) and "tracelab" in mapping:
            root = Path(mapping["tracelab"]).parent
            mapping.update({name: str(repo / Path(folder).relative_to(root)) for name, folder in mapping.items()})


def child(args: argparse.Namespace) -> None:
    """Run the command in this process, stages timed; one JSON line on stdout."""
    import importlib
    import pkgutil
    import resource

    use_checkout(args.repo)
    os.environ["TRACELAB_CACHE"] = os.environ.get("TRACELAB_CACHE", "0")
    os.cpu_count = lambda: 1  # load_many: one worker, in this process
    start = time.process_time()
    for name in IMPORTS:
        importlib.import_module(name)
    import tracelab.reports

    for info in pkgutil.walk_packages(tracelab.reports.__path__, "tracelab.reports."):
        importlib.import_module(info.name)
    imports_s = time.process_time() - start
    from tracelab import cli

    from tracelab.parsers import chrome

    for module in (cli, chrome):
        if not Path(module.__file__).resolve().is_relative_to(args.repo.resolve()):
            sys.exit(f"tracelab came from {module.__file__}, not from {args.repo}")
    files = _loader().expand([args.input])
    floor_sample = files[:args.floor_files]
    import zlib

    floor_s = _floor_s(floor_sample, zlib) * len(files) / len(floor_sample)  # the floor: stdlib zlib
    try:
        from isal import isal_zlib
        floor_isal_s = _floor_s(floor_sample, isal_zlib) * len(files) / len(floor_sample)
    except ImportError:
        floor_isal_s = None
    clock = Clock()
    _install(clock)
    out = Path(args.out)
    argv = [args.command, str(args.input), *args.extra]
    if args.command == "report":
        argv += ["-o", str(out / "bench_stages.html"), "--force"]
    sys.argv = ["tracelab", *argv]
    start, code = time.process_time(), 0
    with open(os.devnull, "w") as sink:
        saved = sys.stdout
        sys.stdout = sink
        try:
            cli.main()
        except SystemExit as e:
            code = e.code
        finally:
            sys.stdout = saved
    total_s = time.process_time() - start
    clock.seconds["render"] = total_s - sum(clock.seconds.values())
    print(json.dumps({"exit": code, "ranks": len(files), "imports_s": imports_s, "floor_s": floor_s,
                      "floor_isal_s": floor_isal_s, "gunzip_by": _gunzip_by(),
                      "floor_files": len(floor_sample), "total_s": total_s, "seconds": clock.seconds,
                      "calls": clock.calls, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "load_avg_1m": os.getloadavg()[0], "argv": argv, "repo": _commit(args.repo)}))


def _gunzip_by() -> str:
    """Which inflate the checkout's read_trace_bytes uses: isal where it takes it and it is installed."""
    from tracelab.core import limits

    return "isal" if getattr(limits, "_isal_zlib", None) is not None else "zlib"


def _commit(repo: Path) -> str:
    """The checkout's commit, + where its tracked files differ from it."""
    run = lambda *cmd: subprocess.run(["git", "-C", str(repo), *cmd], capture_output=True, text=True).stdout.strip()
    return run("rev-parse", "--short", "HEAD") + ("+" if run("status", "--porcelain", "--untracked-files=no") else "")


ORDER = ["gunzip", "decode", "pick", "columns", "shapes", "scopes", "host", "frame", "cache", "classify"]


def totals(seconds: dict[str, float]) -> tuple[float, float]:
    """(parse: gunzip .. classify, digests: every digest:NAME) of a run's CPU seconds per stage."""
    return (sum(seconds.get(s, 0.0) for s in ORDER),
            sum(v for s, v in seconds.items() if s.startswith("digest:")))


def table(result: dict) -> str:
    n, floor = result["ranks"], result["floor_s"]
    secs, calls = result["seconds"], result["calls"]
    names = [s for s in ORDER if s in secs] + sorted(s for s in secs if s.startswith("digest:")) + ["render"]
    rows = [("floor: gunzip (zlib) + raw split", floor, n)]
    if result.get("floor_isal_s"):
        rows.append(("floor with isal's gunzip", result["floor_isal_s"], n))
    rows += [(s, secs[s], calls.get(s, 1)) for s in names]
    parse, digests = totals(secs)
    rows += [("= parse (gunzip .. classify)", parse, n), ("= digests", digests, n),
             ("= command (all stages)", result["total_s"], 1), ("imports (not in the command)", result["imports_s"], 1)]
    lines = [f"`tracelab {' '.join(result['argv'][:1])}` of {n:,} rank{'s' if n > 1 else ''} ({result['repo']}), one process, "
             f"cache off; gunzip by {result.get('gunzip_by', 'zlib')}; load average {result['load_avg_1m']:.1f}; peak RSS {result['peak_rss_mb']:,.0f} MB; "
             f"floor measured on {result['floor_files']} file(s), scaled to {n:,}",
             "", "| stage | calls | CPU (s) | per rank (s) | / floor |", "|---|---:|---:|---:|---:|"]
    for name, s, c in rows:
        lines.append(f"| {name} | {c:,} | {s:.3f} | {s / n:.4f} | {s / floor:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input", nargs="?", type=Path, default=DEFAULT_SRC, help="a trace, or a folder of ranks")
    p.add_argument("--ranks", type=int, help="make N ranks of one job from the trace first (make_ranks.py)")
    p.add_argument("--command", default="report")
    p.add_argument("--out", type=Path, default=REPO / "bench-out")
    p.add_argument("--floor-files", type=int, default=8, help="files the floor is measured on, scaled to all")
    p.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the JSON result too")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    a.extra = argv[cut + 1:]  # more arguments for the command, after --
    if a.child:
        return child(a)
    a.out.mkdir(parents=True, exist_ok=True)
    target = a.input
    if a.ranks:
        target = a.out / f"ranks-{a.input.name.split('.')[0]}-{a.ranks}"
        if not target.exists():
            subprocess.run([sys.executable, str(REPO / "benchmarks/make_ranks.py"), str(target), "--ranks",
                            str(a.ranks), "--src", str(a.input)], check=True)
    cmd = [sys.executable, __file__, str(target), "--child", "--command", a.command, "--out", str(a.out),
           "--floor-files", str(a.floor_files), "--repo", str(a.repo), "--", *a.extra]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"bench_stages: the child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if a.json:
        print(json.dumps(result))
    print(table(result))


if __name__ == "__main__":
    main()
