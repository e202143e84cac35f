"""Where a Kineto parse's pick goes: msgspec's decode of the events into the union against the
columns made from its Structs (the deal), beside the floor, on one warm process.

    python benchmarks/pick_split.py TRACE [TRACE ...] [--runs 7]

Per trace, the least CPU time (process_time) of --runs after one untimed run, in seconds:
floor = ISA-L's gunzip (zlib's without isal) + msgspec's raw split of `traceEvents`; raw = the
raw split alone of the runs cut from the bytes (parsers/_kineto_layout); decode = the union's
decode of the same runs (parsers/_kineto_union: a Struct per chosen event, an empty one per
other); deal = the decoded events dealt into the collectors' columns (_Union.deal: ts, names,
ids, args); read_events = the pick as chrome.read runs it (decode and deal run by run, then the
events after the runs). A trace the runs cannot be cut from (array_layout None) is skipped.
"""
from __future__ import annotations

import argparse
import os
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from warm_parse import _Split, warm_least  # noqa: E402


def _gunzip():
    try:
        from isal import isal_zlib
        return isal_zlib.decompress
    except ImportError:
        return zlib.decompress


def split(path: Path, runs: int) -> dict[str, float] | None:
    """The seconds of each part (module docstring) for one trace; None where it is not cut into runs."""
    import msgspec

    from tracelab.parsers import chrome
    from tracelab.parsers._kineto_json import _RAWS_DECODER, array_layout, read_bytes, read_events
    from tracelab.parsers._kineto_union import Source, _Union

    groups = chrome.KINETO_GROUPS
    raw, data = path.read_bytes(), read_bytes(path)
    layout = array_layout(data)
    if layout is None:
        return None
    cuts, union, source = layout[0], _Union(groups), Source(data)
    decoded = [source.decode_run(union.decoder, s, e) for s, e in cuts]
    gunzip, splitter = _gunzip(), msgspec.json.Decoder(_Split)

    def deal() -> None:
        picked = [collector() for _, collector in groups]
        for events in decoded:
            union.deal(events, picked)

    return {"floor": warm_least(lambda: splitter.decode(gunzip(raw, 31)), runs),
            "raw": warm_least(lambda: [source.decode_run(_RAWS_DECODER, s, e) for s, e in cuts], runs),
            "decode": warm_least(lambda: [source.decode_run(union.decoder, s, e) for s, e in cuts], runs),
            "deal": warm_least(deal, runs),
            "read_events": warm_least(lambda: read_events(path, data, groups), runs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--runs", type=int, default=7)
    a = p.parse_args()
    print(f"least of {a.runs}, one warm process; load {os.getloadavg()[0]:.1f}\n")
    print("| trace | floor s | raw split s | union decode s | deal s | read_events s | read_events / floor |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for path in a.traces:
        s = split(path, a.runs)
        if s is None:
            print(f"| {path.name} | not cut into runs | | | | | |")
            continue
        print(f"| {path.name} | {s['floor']:.4f} | {s['raw']:.4f} | {s['decode']:.4f} | {s['deal']:.4f} | "
              f"{s['read_events']:.4f} | {s['read_events'] / s['floor']:.2f}x |")


if __name__ == "__main__":
    main()
