"""Kineto trace load speed and peak memory: tracelab against HolisticTraceAnalysis 0.5.0.

    python benchmarks/bench_chrome.py [--src TRACE.json.gz] [--copies 12] [--repeat 3]
                                      [--hta-python /work/bench-venv/bin/python] [--write RESULTS.md]

Tiles a real trace in time with ../shared/bench/tile_trace.py into bench-out/ (made
once), then loads it in fresh processes: `tracelab.load` (its Parquet cache off, so
every run parses) and HTA's `TraceAnalysis(trace_dir=...)` from its own venv (HTA
needs pandas < 3 and would disturb ours). Wall time is the load call, timed inside
the child; peak memory is the child's maximum resident set, from wait4 (what
/usr/bin/time reports), so it counts the interpreter, imports and everything.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DEFAULT_SRC = SHARED / "traces/hta/trace_diff/control/control.json.gz"

TRACELAB_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import tracelab
t1 = time.perf_counter()
prof = tracelab.load(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "rows": len(prof.events),
                  "version": tracelab.__version__}))
"""

HTA_CHILD = """
import json, sys, time
from importlib.metadata import version
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1,
                  "rows": sum(len(df) for df in analysis.t.traces.values()),
                  "version": version("HolisticTraceAnalysis"), "pandas": version("pandas")}))
"""


def tiled_trace(src: Path, copies: int, out_dir: Path) -> Path:
    """The tiled trace, alone in its folder (HTA reads every trace in trace_dir)."""
    folder = out_dir / f"{src.name.split('.')[0]}-x{copies}"
    dst = folder / "trace.json"
    if not dst.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(SHARED / "bench/tile_trace.py"), str(src), str(dst),
                        "--copies", str(copies)], check=True)
    return dst


def run_child(python: str, code: str, arg: Path, env: dict[str, str]) -> dict:
    """Run `code` in a fresh interpreter; its JSON line plus its peak RSS (wait4)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([python, "-c", code, str(arg)], stdout=out, stderr=subprocess.DEVNULL,
                                env={**os.environ, **env}, cwd=tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{python} -c ... {arg} failed with exit status {proc.returncode}")
    result = json.loads(text.strip().splitlines()[-1])
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: kB
    result["process_cpu_s"] = usage.ru_utime + usage.ru_stime  # whole process, children included
    result["load_avg_1min"] = os.getloadavg()[0]
    return result


def measure(name: str, python: str, code: str, trace: Path, repeat: int, env: dict[str, str]) -> dict:
    runs = []
    for i in range(repeat):
        runs.append(run_child(python, code, trace if name == "tracelab" else trace.parent, env))
        print(f"{name} run {i + 1}: load {runs[-1]['load_s']:.2f} s, process CPU "
              f"{runs[-1]['process_cpu_s']:.2f} s, peak RSS {runs[-1]['peak_rss_mb']:.0f} MB, "
              f"load average {runs[-1]['load_avg_1min']:.2f}", flush=True)
    return {"runs": runs, **{key: statistics.median(r[key] for r in runs)
                             for key in ("load_s", "process_cpu_s", "peak_rss_mb")}}


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    return f"{os.cpu_count()} cores ({cpu}), {mem_kb / 2**20:.0f} GiB RAM, {platform.platform()}"


def markdown(args: argparse.Namespace, trace: Path, tl: dict, hta: dict) -> str:
    import msgspec
    import pandas

    size_mb = trace.stat().st_size / 1e6
    speedup, memory = hta["load_s"] / tl["load_s"], tl["peak_rss_mb"] / hta["peak_rss_mb"]
    cpu_ratio = hta["process_cpu_s"] / tl["process_cpu_s"]
    rows = [("tracelab.load (cache off)", tl), ("HTA TraceAnalysis(trace_dir=...)", hta)]
    table = "\n".join(f"| {n} | {m['load_s']:.2f} s | {m['process_cpu_s']:.2f} s | {m['peak_rss_mb']:,.0f} MB | "
                      f"{', '.join(format(r['load_s'], '.2f') for r in m['runs'])} | "
                      f"{', '.join(format(r['load_avg_1min'], '.1f') for r in m['runs'])} | {m['runs'][0]['rows']:,} |"
                      for n, m in rows)
    command = (f"python benchmarks/bench_chrome.py --src {args.src} --copies {args.copies} "
               f"--repeat {args.repeat} --hta-repeat {args.hta_repeat}")
    return f"""
## Kineto trace load: tracelab vs HolisticTraceAnalysis (benchmarks/bench_chrome.py)

- When: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC
- Machine: {machine()}; a shared dev machine (load average at each run below)
- Command: `{command}`
- Trace: {args.src.name} tiled {args.copies} times = {size_mb:.0f} MB of JSON
- Versions: tracelab {tl['runs'][0]['version']} (Python {platform.python_version()}, msgspec {msgspec.__version__}, \
pandas {pandas.__version__}); HolisticTraceAnalysis {hta['runs'][0]['version']} (pandas {hta['runs'][0]['pandas']}, \
its default JSON backend); each load in a fresh process

| loader | load wall time | process CPU time | peak RSS | load wall time per run, s | load average per run | rows |
|---|---|---|---|---|---|---|
{table}

Medians over the runs. tracelab is **{speedup:.1f}x** HTA's speed (wall) and
**{cpu_ratio:.1f}x** (CPU time, whole process, imports included) at **{memory:.2f}x** its peak
memory (target: >= 10x and <= 0.5x). HTA keeps every event (CPU ops too) as rows;
tracelab keeps the GPU activity.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--copies", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hta-repeat", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "bench-out")
    parser.add_argument("--hta-python", default="/work/bench-venv/bin/python")
    parser.add_argument("--write", type=Path, help="append the results section to this markdown file")
    args = parser.parse_args()
    trace = tiled_trace(args.src, args.copies, args.out)
    tl = measure("tracelab", sys.executable, TRACELAB_CHILD, trace, args.repeat, {"TRACELAB_CACHE": "0"})
    hta = measure("hta", args.hta_python, HTA_CHILD, trace, args.hta_repeat, {})
    section = markdown(args, trace, tl, hta)
    (args.out / "bench_chrome.json").write_text(json.dumps({"tracelab": tl, "hta": hta}, indent=1))
    if args.write:
        with open(args.write, "a") as f:
            f.write(section)
    print(section)


if __name__ == "__main__":
    main()
