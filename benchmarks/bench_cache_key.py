"""What keying the parse cache costs against a parse: the stat identity tracelab uses
(path, device, inode, size, mtime_ns, ctime_ns, as git's index) and a content hash
(sha256 of the file) that would also never be stale, on one Kineto trace made by tiling
the events of tests/data/decode-1gpu-torch until the gzip file is about --mb MB.

    python benchmarks/bench_cache_key.py --mb 40
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import tempfile
import time
from pathlib import Path

from tracelab import cache
from tracelab.parsers import chrome

GOOD = Path(__file__).resolve().parents[1] / "tests" / "data" / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"


def tiled_trace(folder: Path, target_mb: float) -> Path:
    """The good trace with its events repeated, shifted in time, until the gzip is ~target_mb."""
    doc = json.loads(gzip.decompress(GOOD.read_bytes()))
    events = doc["traceEvents"]
    span_us = max(e.get("ts", 0) for e in events) - min(e.get("ts", 0) for e in events if "ts" in e) + 1
    ratio = len(GOOD.read_bytes()) / len(json.dumps(doc))
    copies = max(1, int(target_mb * 1e6 / ratio / len(json.dumps(doc))))
    doc["traceEvents"] = [{**e, "ts": e["ts"] + i * span_us} if "ts" in e else e
                          for i in range(copies) for e in events]
    path = folder / "rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), 6))
    return path


def best_s(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=40.0, help="size of the gzip trace to make")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = tiled_trace(Path(tmp), args.mb)
        cache.MIN_BYTES = 0
        rows = {"stat identity (cache.key)": best_s(lambda: cache.key(path, chrome.__file__)),
                "sha256 of the file": best_s(lambda: sha256_file(path)),
                "parse (chrome.read)": best_s(lambda: chrome.read(path), repeat=2)}
        print(f"trace: {path.stat().st_size / 1e6:.1f} MB gzip")
        for name, seconds in rows.items():
            print(f"{name:28s} {seconds * 1e3:10.3f} ms")


if __name__ == "__main__":
    main()
