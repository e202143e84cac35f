"""Peak memory of reading a Kineto trace of N tiny kernels, against the trace's size (issue 29).

    python benchmarks/mem_kernels.py --kernels 1e6 3e6 6e6 [--out /tmp/mem] [--keep]

For each N: writes a trace of N kernel events (~135 bytes of JSON each, as small as a real
kernel event gets) with write_trace(), then runs `tracelab breakdown TRACE --format csv`
in a child process and reads the child's peak RSS (getrusage RUSAGE_CHILDREN: ru_maxrss).
Prints one markdown row per N: kernels, JSON MB, peak RSS MB, RSS / JSON, RSS bytes per
kernel, CPU s (user+sys), and the child's exit status and last stderr line.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

CHUNK_EVENTS = 100_000


def kernel_event(i: int) -> bytes:
    """One kernel: 1 us apart, 0.5 us long, on stream 7 of device 0; correlation i."""
    return (b'{"ph":"X","cat":"kernel","name":"k%d","pid":0,"tid":7,"ts":%d.000,"dur":0.5,'
            b'"args":{"device":0,"stream":7,"correlation":%d}}' % (i % 64, 1_000_000 + i, i))


def write_trace(path: Path, n_kernels: int) -> int:
    """A Kineto trace of `n_kernels` kernel events, written in chunks; its size in bytes."""
    with open(path, "wb") as f:
        f.write(b'{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA H100 80GB HBM3"}],'
                b'"distributedInfo":{"rank":0,"world_size":1},"traceEvents":[\n')
        for start in range(0, n_kernels, CHUNK_EVENTS):
            stop = min(start + CHUNK_EVENTS, n_kernels)
            f.write(b",\n".join(kernel_event(i) for i in range(start, stop)))
            f.write(b",\n" if stop < n_kernels else b"\n")
        f.write(b"]}\n")
    return path.stat().st_size


def measure(trace: Path, env: dict[str, str]) -> dict:
    """Peak RSS (bytes) and CPU seconds of one `tracelab breakdown` child; its status and last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tracelab", "breakdown", str(trace), "--format", "csv"],
                          capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"rss_bytes": after.ru_maxrss * 1024, "wall_s": time.perf_counter() - t0,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "status": done.returncode, "last": (done.stderr.strip().splitlines() or [""])[-1][:160]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", type=float, nargs="+", default=[1e6, 3e6, 6e6])
    parser.add_argument("--out", type=Path, default=Path("/tmp/tracelab-mem"))
    parser.add_argument("--keep", action="store_true", help="keep the traces")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TRACELAB_CACHE": "0"}
    print("| kernels | JSON MB | peak RSS MB | RSS / JSON | RSS bytes per kernel | CPU s | exit | last line |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in map(int, args.kernels):  # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: smallest first
        trace = args.out / f"kernels-{n}.pt.trace.json"
        size = write_trace(trace, n)
        r = measure(trace, env)
        print(f"| {n:,} | {size / 1e6:,.0f} | {r['rss_bytes'] / 1e6:,.0f} | {r['rss_bytes'] / size:.2f} | "
              f"{r['rss_bytes'] / n:,.0f} | {r['cpu_s']:.1f} | {r['status']} | {r['last']} |", flush=True)
        if not args.keep:
            trace.unlink()


if __name__ == "__main__":
    main()
