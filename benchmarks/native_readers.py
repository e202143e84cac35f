"""Could a compiled JSON reader beat tracelab's Kineto pick? One trace's events, already gunzipped,
read by each reader in this one process (least CPU time of --repeat, process_time, one thread):

    split        msgspec's raw split of the events (the second half of issue 30's floor)
    union-empty  msgspec's decode of the events into tracelab's tagged union on `cat` with every
                 Struct empty: what any msgspec reader that sorts events by category pays
    union        the same with tracelab's Structs (the fields and args a row needs): decode only
    pick         tracelab's read_events: the union's decode and the events dealt into columns
    pyarrow      pyarrow.json.read_json, an explicit schema of the fields pick reads, unexpected
                 fields ignored, use_threads=False, on the events as NDJSON (making it not counted)
    duckdb       duckdb's read_json (yyjson) of the events as one JSON array from /dev/shm, the same
                 columns, threads=1, to an Arrow table (only where duckdb imports: it is no
                 dependency of tracelab; `pip install --target DIR duckdb` and PYTHONPATH=DIR)

    python benchmarks/native_readers.py TRACE.json[.gz] [--repeat 7]

The compiled readers get the easier job: their columns hold text or floats where pick's hold
exact ns, shared names and the shapes' raw JSON, and none checks the values' bounds.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kineto_floor import least  # noqa: E402


def _groups():
    from tracelab.parsers import _kineto_columns as kc, chrome
    return [(set(chrome.GPU_KINDS), kc.Picked), ({chrome.ANNOTATION}, kc.Calls), (chrome.LAUNCHES, kc.Calls),
            ({chrome.USER_ANNOTATION}, kc.Calls), (chrome.CPU_OPS, kc.Ops), ({chrome.MEMORY}, kc.Instants)]


def _empty_groups(groups):
    import msgspec

    from tracelab.parsers import _kineto_columns as kc
    empty = msgspec.defstruct("_Empty", [], gc=False)
    return [(cats, type(f"_Empty{i}", (kc.Calls,), {"STRUCT": empty})) for i, (cats, _) in enumerate(groups)]


def _msgspec_readers(path: Path, data: bytearray) -> dict:
    import msgspec

    from tracelab.parsers import _kineto_json as kj, _kineto_union
    layout = kj.cut(data, kj.RUN_BYTES)
    if layout is None:
        sys.exit(f"{path}: its events cannot be cut into runs (not Kineto's layout)")
    runs = layout[0]
    source, raws = _kineto_union._Source(data), msgspec.json.Decoder(list[msgspec.Raw])

    def decode_all(groups):
        union = _kineto_union._Union(groups)
        return lambda: [source.decode_run(union.decoder, start, end) for start, end in runs]

    groups = _groups()
    return {"split": lambda: [source.decode_run(raws, start, end) for start, end in runs],
            "union-empty": decode_all(_empty_groups(groups)), "union": decode_all(groups),
            "pick": lambda: kj.read_events(path, data, groups)}


def _events_text(data: bytearray) -> bytes:
    """The events of traceEvents as one JSON array (what the compiled readers are given)."""
    from tracelab.parsers import _kineto_json as kj
    runs = kj.cut(data, kj.RUN_BYTES)[0]
    return b"[" + bytes(data[runs[0][0]:runs[-1][1]]) + b"]"


_ARGS = {"External id": "int64", "correlation": "int64", "device": "int64", "stream": "int64"}
_RAW_ARGS = ("Input Dims", "Input type", "Concrete Inputs")


def _pyarrow_reader(events: bytes):
    import pyarrow as pa
    import pyarrow.json as pj
    ndjson = re.sub(rb"\}[ \t\n\r]*,[ \t\n\r]*\{", b"}\n{", events[1:-1].replace(b"\n", b" ")) + b"\n"
    args = [(k, pa.int64()) for k in _ARGS] + [("Input Dims", pa.list_(pa.list_(pa.int64()))),
                                               ("Input type", pa.list_(pa.string()))]
    schema = pa.schema([("cat", pa.string()), ("name", pa.string()), ("pid", pa.int64()), ("tid", pa.int64()),
                        ("ts", pa.float64()), ("dur", pa.float64()), ("args", pa.struct(args))])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    read = pj.ReadOptions(use_threads=False, block_size=8 << 20)
    return lambda: pj.read_json(pa.BufferReader(ndjson), read_options=read, parse_options=options)


def _duckdb_reader(events: bytes, folder: Path):
    try:
        import duckdb
    except ImportError:
        return None
    file = folder / "events.json"
    file.write_bytes(events)
    con = duckdb.connect()
    con.execute("SET threads=1")
    args = ", ".join([f'"{k}" BIGINT' for k in _ARGS] + [f'"{k}" JSON' for k in _RAW_ARGS])
    query = (f"select * from read_json('{file}', format='array', maximum_object_size=1000000000, columns="
             f"{{cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', ts: 'VARCHAR', dur: 'DOUBLE', "
             f"args: 'STRUCT({args})'}})")
    return lambda: con.sql(query).to_arrow_table()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", type=Path)
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args()
    from tracelab.parsers import _kineto_json as kj
    data = kj.read_bytes(a.trace)
    readers = _msgspec_readers(a.trace, data)
    events = _events_text(data)
    readers["pyarrow"] = _pyarrow_reader(events)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as folder:
        if (duck := _duckdb_reader(events, Path(folder))) is not None:
            readers["duckdb"] = duck
        print(f"{a.trace.name}: {len(data) / 1e6:.1f} MB of JSON, least CPU of {a.repeat}, one thread")
        print("| reader | CPU (s) | / split |")
        print("|---|---|---|")
        split_s = None
        for name, read in readers.items():
            read()  # warm: imports, caches, the first allocation of each size
            cpu_s = least(read, a.repeat)
            split_s = split_s or cpu_s
            print(f"| {name} | {cpu_s:.4f} | {cpu_s / split_s:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
