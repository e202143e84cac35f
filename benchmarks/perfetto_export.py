"""Size and write time of `tracelab export perfetto` (reports/perfetto/perfetto.py):

    python benchmarks/perfetto_export.py [--ranks 64]

Three inputs: the 2-rank Kineto pair in tests/data/train-2gpu-torch, the 2-process nsys file
../shared/traces/nsys-ai/h100_2gpu_1s.sqlite (skipped when absent), and N tiled ranks: one
Kineto rank file (../shared/traces/hta/trace_filter/sampled_rank-0.json.gz, else the pair's
rank 0) copied N times with distributedInfo.rank rewritten. Load time (parsing, in parallel
processes, cache off) is printed apart from write time (events -> trace dict -> JSON -> file).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

from tracelab.inputs import label_inputs, write
from tracelab.loading import load_many
from tracelab.reports.perfetto import perfetto

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
PAIR = ROOT / "tests" / "data" / "train-2gpu-torch"
NSYS = SHARED / "nsys-ai" / "h100_2gpu_1s.sqlite"
TILE_SOURCE = SHARED / "hta" / "trace_filter" / "sampled_rank-0.json.gz"


def tile(source: Path, ranks: int, folder: Path) -> Path:
    """`ranks` copies of one Kineto rank file, each claiming its own rank."""
    doc = json.loads(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
    for rank in range(ranks):
        doc.setdefault("distributedInfo", {}).update(rank=rank, world_size=ranks)
        (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return folder


def measure(name: str, path: Path, out_dir: Path) -> dict:
    began = time.perf_counter()
    inputs = label_inputs([path], [load_many([path])])
    loaded = time.perf_counter()
    doc = perfetto.trace(inputs)
    events = len(doc["traceEvents"])
    data = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    plain = write(out_dir / f"{name}.json", data, force=True)
    written = time.perf_counter()
    packed = write(out_dir / f"{name}.json.gz", gzip.compress(data, mtime=0), force=True)
    return {"input": name, "ranks": len(inputs), "events": events, "load_s": loaded - began,
            "write_s": written - loaded, "json_mb": plain.stat().st_size / 1e6,
            "gz_mb": packed.stat().st_size / 1e6, "gz_s": time.perf_counter() - written + (written - loaded)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64, help="tiled ranks")
    args = parser.parse_args()
    os.environ["TRACELAB_CACHE"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = [("kineto-pair", PAIR)] + ([("nsys-2gpu", NSYS)] if NSYS.exists() else [])
        tiled = tile(TILE_SOURCE if TILE_SOURCE.exists() else PAIR / "rank0.pt.trace.json.gz", args.ranks,
                     Path(tempfile.mkdtemp(dir=tmp)))
        cases.append((f"tiled-{args.ranks}", tiled))
        print("| input | ranks | trace events | load (s) | write .json (s) | .json (MB) | write .json.gz (s) | .json.gz (MB) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, path in cases:
            r = measure(name, path, tmp)
            print(f"| {r['input']} | {r['ranks']} | {r['events']:,} | {r['load_s']:.2f} | {r['write_s']:.2f} | "
                  f"{r['json_mb']:.2f} | {r['gz_s']:.2f} | {r['gz_mb']:.2f} |")


if __name__ == "__main__":
    main()
