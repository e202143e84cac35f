"""What each field of a Kineto event costs msgspec's decode: every run of the trace (parsers/_kineto_layout's
cut) decoded in place into a tagged union on `cat` whose chosen categories (parsers/chrome.KINETO_GROUPS)
get a Struct of only the fields named, each other category an empty one, beside msgspec's raw split of the
same runs and tracelab's own union. Least CPU of --runs in each of --rounds rounds, all in one process.

    python benchmarks/decode_fields.py TRACE [--runs 5] [--rounds 3] [--repo DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Union

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stages import use_checkout  # noqa: E402
from warm_parse import warm_least  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", type=Path)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repo", type=Path)
    a = p.parse_args()
    if a.repo:
        use_checkout(a.repo)
    from tracelab.core import limits
    from tracelab.core.options import Options
    from tracelab.parsers import _kineto_columns as kc, _kineto_json as kj, chrome
    from tracelab.parsers._kineto_union import KNOWN_CATEGORIES, Source, _Union

    limits.reuse_freed_memory(Options.from_environment())
    data = kj.read_bytes(a.trace)
    layout = kj.array_layout(data)
    if layout is None:
        sys.exit(f"{a.trace}: not cut into runs (parsers/_kineto_layout): nothing to measure")
    runs, source = layout[0], Source(data)
    chosen = {cat for cats, _ in chrome.KINETO_GROUPS for cat in cats}
    categories = sorted(set(KNOWN_CATEGORIES) | chosen)

    call_args = msgspec.defstruct("CallArgs", [("correlation", kc.Number, None),
                                               ("external_id", kc.Number, msgspec.field(default=None, name="External id"))],
                                  gc=False)
    fields = {"ts": ("ts", msgspec.Raw), "name": ("name", str, ""), "pid": ("pid", kc.Id, None),
              "tid": ("tid", kc.Id, None), "dur": ("dur", kc.DurUs, 0.0), "args": ("args", call_args | None, None)}

    def union(names: list[str]) -> msgspec.json.Decoder:
        struct = msgspec.defstruct("Chosen", [fields[n] for n in names], gc=False)
        members = tuple(msgspec.defstruct("_Event", [], bases=(struct,) if c in chosen else (), tag_field="cat",
                                          tag=c, gc=False) for c in categories)
        return msgspec.json.Decoder(list[Union[members]])  # type: ignore[valid-type]

    decoders = {"raw split of the runs": msgspec.json.Decoder(list[msgspec.Raw]), "every Struct empty": union([])}
    for i in range(1, len(fields) + 1):
        decoders["+".join(list(fields)[:i])] = union(list(fields)[:i])
    decoders["tracelab's union"] = _Union(chrome.KINETO_GROUPS).decoder
    best = dict.fromkeys(decoders, float("inf"))
    for _ in range(a.rounds):
        for name, decoder in decoders.items():
            best[name] = min(best[name], warm_least(lambda: [source.decode_run(decoder, s, e) for s, e in runs], a.runs))
    events = sum(len(source.decode_run(decoders["raw split of the runs"], s, e)) for s, e in runs)
    print(f"{a.trace.name}: {events:,} events in {len(runs)} runs, {Path(kc.__file__).parents[1]} "
          f"(least of {a.runs} x {a.rounds}; load {os.getloadavg()[0]:.1f})")
    print("| Struct of each chosen event | decode (s) |\n|---|---:|")
    for name, s in best.items():
        print(f"| {name} | {s:.4f} |")


if __name__ == "__main__":
    main()
