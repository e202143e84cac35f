"""sweep.py's checks: each command's first claim against sweep_raw's facts.

A check returns (verdict, evidence). The tolerance on a time is 2% (a trace's microsecond
floats against tracelab's integer ns); counts must match exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import sweep_raw

REL_TOL = 0.02
ORDER = {"false": 0, "misleading": 1, "unsupported": 2, "true": 3}


def close(a: float, b: float, tol: float = REL_TOL) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1.0)


def ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def first_finding(text: str) -> str | None:
    match = re.search(r"^findings:\s*\n\s*1\. (.+?)(?=\n\s*2\. |\n\S|\Z)", text, re.M | re.S)
    return " ".join(match.group(1).split()) if match else None


def worst(results: list[tuple[str, str]]) -> tuple[str, str]:
    if not results:
        return "unsupported", "nothing to check"
    verdict = min((v for v, _ in results), key=ORDER.__getitem__)
    return verdict, "; ".join(e for _, e in results)


# --- the JSON's first row or verdict, per command -------------------------------------------


def check_breakdown(doc: dict, raw: sweep_raw.Raw) -> list[tuple[str, str]]:
    summary, top = doc["summary"][0], doc["breakdown"][0]
    totals = sweep_raw.kernel_totals(raw)
    kernel_ns = sum(totals.values())
    busy_ns = sweep_raw.union_ns([(op.start_ns, op.end_ns) for op in raw.ops])
    shown_ns, calls = sweep_raw.named_total(raw, top["kernel"])
    out = [
        (_v(close(summary["kernel_ns"], kernel_ns)), f"kernels {ms(summary['kernel_ns'])} vs raw {ms(kernel_ns)}"),
        (_v(close(summary["busy_ns"], busy_ns)), f"busy {ms(summary['busy_ns'])} vs raw {ms(busy_ns)}"),
    ]
    if top["kernel"].startswith(("Memcpy", "Memset")):
        return out
    biggest = max(totals.values(), default=0.0)
    ok = close(top["total_ns"], shown_ns) and top["total_ns"] >= biggest * (1 - REL_TOL)
    out.append((_v(ok), f"top '{top['kernel'][:40]}' {ms(top['total_ns'])} vs raw {ms(shown_ns)} ({calls} calls)"))
    return out


def _raw_step(raw: sweep_raw.Raw, step: int | None) -> dict | None:
    if step is None or step not in raw.steps:
        return None
    return sweep_raw.window(sweep_raw.step_ops(raw, step))


def check_steps(doc: dict, raw: sweep_raw.Raw) -> list[tuple[str, str]]:
    rows = doc.get("steps") or []
    with_gpu = [s for s in raw.steps if sweep_raw.step_ops(raw, s)]
    if not rows:
        return [(_v(not with_gpu), f"no steps shown; raw ProfilerStep ranges with GPU work: {len(with_gpu)}")]
    out = []
    shown = {r["step"] for r in rows}
    if raw.steps:
        out.append((_v(shown == set(with_gpu)) if shown <= set(raw.steps) else "false",
                    f"steps {sorted(shown)[:6]} vs raw {sorted(with_gpu)[:6]}"))
    facts = _raw_step(raw, rows[0]["step"])
    if facts:
        # Either convention for the ops of a step: launched in its range, or running in it.
        by_time = sweep_raw.window(sweep_raw.step_ops_by_time(raw, rows[0]["step"]))
        for key in ("busy_ns", "span_ns"):
            ok = close(rows[0][key], facts[key]) or close(rows[0][key], by_time[key])
            out.append((_v(ok), f"step {rows[0]['step']} {key[:-3]} {ms(rows[0][key])} vs raw {ms(facts[key])} "
                                f"(launched in the step) or {ms(by_time[key])} (running in it)"))
    elif not raw.steps:
        busy = sweep_raw.union_ns([(op.start_ns, op.end_ns) for op in raw.ops])
        out.append((_v(close(rows[0]["busy_ns"], busy)), f"whole trace busy {ms(rows[0]['busy_ns'])} vs raw {ms(busy)}"))
    return out


def _bound_ok(bound: str, facts: dict) -> tuple[str, str]:
    """host needs host-caused idle (before or during the launch calls) of 10% of the step; gpu is
    false where it is half the step, and misleading where the host was late (had not begun the
    launch) for 10% of it. Between, where launch calls alone take host-caused idle past 10% of a
    busy GPU's step, both are borne out: the host ran ahead, its calls cost the idle."""
    caused = facts["host_caused_ns"] / max(facts["span_ns"], 1.0)
    late = facts["host_late_ns"] / max(facts["span_ns"], 1.0)
    busy = facts["busy_ns"] / max(facts["span_ns"], 1.0)
    evidence = (f"bound {bound}: raw host-caused idle {caused:.1%} of the step ({late:.1%} before the launch call "
                f"began), GPU busy {busy:.0%}")
    if bound == "host":
        return _v(caused >= 0.10), evidence
    if bound == "gpu":
        return ("false" if caused >= 0.5 else "misleading" if late >= 0.10 else "true"), evidence
    return ("misleading" if caused >= 0.5 else "true"), evidence


def check_idle(doc: dict, raw: sweep_raw.Raw) -> list[tuple[str, str]]:
    rows = doc.get("steps") or []
    if not rows:
        return [(_v(not raw.ops), "no steps shown; raw GPU ops: %d" % len(raw.ops))]
    row = rows[0]
    facts = _raw_step(raw, row["step"])
    if facts is not None:  # the convention (launched in the step, or running in it) whose span it shows
        by_time = sweep_raw.window(sweep_raw.step_ops_by_time(raw, row["step"]))
        facts = min((facts, by_time), key=lambda f: abs(f["span_ns"] - row["span_ns"]))
    elif not raw.steps:
        facts = sweep_raw.window(raw.ops)
    if facts is None:
        return [("unsupported", f"step {row['step']} is no ProfilerStep range in the file")]
    out = [_bound_ok(row["bound"], facts)]
    out.append((_v(close(row["idle_ns"], facts["span_ns"] - facts["busy_ns"])),
                f"idle {ms(row['idle_ns'])} vs raw {ms(facts['span_ns'] - facts['busy_ns'])}"))
    return out


def check_whatif(doc: dict, raw: sweep_raw.Raw, text: str = "") -> list[tuple[str, str]]:
    steps = doc.get("steps") or []
    scenarios = [s for s in doc.get("scenarios") or [] if s.get("steps")]
    if not steps or not scenarios:
        # Declining is right where GPU starts are unexplained: ops no host call launched, or
        # ops that start later than both their launch and the GPU's earlier work.
        orphans = sum(op.launch_ns is None for op in raw.ops)
        late_ns = sweep_raw.unexplained_ns(raw.ops)
        said = "no saving is claimed" in text or "no steps" in text
        ok = said and (orphans or late_ns > 0.005 * max(sweep_raw.window(raw.ops)["span_ns"], 1.0) or not raw.ops)
        verdict = _v(ok) if said else "unsupported"
        stated = re.search(r"an edge is missing \(([\d,.]+) ms of GPU starts", text)
        if ok and stated and _num(stated.group(1)) * 1e6 > 2 * late_ns + 1e6:
            verdict = "misleading"  # the decline stands, but on more unexplained time than the file shows
        return [(verdict, f"claims no saving{' (' + stated.group(1) + ' ms unexplained)' if stated else ''}; raw GPU "
                          f"ops without a launch call: {orphans} of {len(raw.ops)}, unexplained start delays {ms(late_ns)}")]
    facts = _raw_step(raw, steps[0]["step"]) or (sweep_raw.window(raw.ops) if not raw.steps else None)
    out = []
    for scenario in scenarios:
        if "roofline" in scenario["name"] + scenario["args"] or facts is None or scenario["steps"] != 1:
            continue
        # Removing host gaps alone cannot make a step shorter than the GPU's own busy time.
        ok = scenario["predicted_ns"] >= facts["busy_ns"] * (1 - REL_TOL)
        out.append((_v(ok), f"{scenario['name']}: predicted {ms(scenario['predicted_ns'])} vs raw busy {ms(facts['busy_ns'])}"))
    out += _path_names(steps[0], raw)
    first = scenarios[0]
    out.append((_v(0 <= first["saving_ns"] <= first["step_ns"]),
                f"{first['name']}: saves {ms(first['saving_ns'])} of {ms(first['step_ns'])}"))
    return out


def _path_names(step: dict, raw: sweep_raw.Raw) -> list[tuple[str, str]]:
    """A host op or range named on the critical path cannot lie on it longer than it lasts in the
    whole file (its durations summed: an upper bound)."""
    out = []
    for item in step.get("top") or []:
        if item.get("what") != "host" or item.get("name") not in raw.host_ns:
            continue
        lasts = raw.host_ns[item["name"]]
        out.append((_v(item["ns"] <= lasts * (1 + REL_TOL)),
                    f"'{item['name'][:40]}' {ms(item['ns'])} on the path, lasts {ms(lasts)} in the file"))
    return out[:3] if all(v == "true" for v, _ in out) else [r for r in out if r[0] != "true"]


DEVICE_FAMILY = re.compile(r"(H100|H200|H800|H20|B200|GB200|A100|V100|MI\d{3}X?|RTX \w+|A10G?|L4|T4)", re.I)


def check_roofline(doc: dict, raw: sweep_raw.Raw) -> list[tuple[str, str]]:
    device = (doc.get("device") or {}).get("name") or "unknown"
    named = [d for d in raw.devices if d]
    out = []
    families = {m.group(1).upper() for d in named for m in [DEVICE_FAMILY.search(d)] if m}
    shown = DEVICE_FAMILY.search(device)
    if families and shown:
        out.append((_v(shown.group(1).upper() in families), f"device {device} vs file {named[0]}"))
    elif shown and not named:
        out.append(("misleading", f"device {device} where the file names none ({raw.device_key or 'no device key'})"))
    elif named and not shown:
        out.append(("true", f"device {device} for {named[0]} (no roof claimed)"))
    rows = doc.get("rows") or []
    if rows:
        shown_ns, calls = sweep_raw.named_total(raw, rows[0]["key"])
        out.append((_v(close(rows[0]["dur_ns"], shown_ns)) if calls else "unsupported",
                    f"top '{rows[0]['key'][:40]}' {ms(rows[0]['dur_ns'])} vs raw {ms(shown_ns)}"))
    return out


def check_memory(doc: dict, raw: sweep_raw.Raw) -> list[tuple[str, str]]:
    rows = doc.get("steps") or []
    if not rows:
        return [(_v(not raw.memory), f"no memory rows; raw [memory] samples: {len(raw.memory)}")]
    row = rows[0]
    if row["step"] in raw.steps:
        start, end = raw.steps[row["step"]]
        samples = [m for m in raw.memory if start <= m[0] <= end]
    else:
        samples = raw.memory
    if not samples:
        return [("unsupported", f"step {row['step']}: no raw samples in its range")]
    peak = max(m[1] for m in samples)
    return [(_v(close(row["peak_allocated_bytes"], peak, 0.001)),
             f"peak {row['peak_allocated_bytes'] / 2**20:,.2f} MiB vs raw {peak / 2**20:,.2f} MiB")]


def check_report(out: Path) -> list[tuple[str, str]]:
    html = out / "report.html"
    ok = html.is_file() and html.read_bytes()[:200].lower().lstrip().startswith(b"<!doctype html")
    size = html.stat().st_size if html.is_file() else 0
    return [(_v(ok), f"wrote {size:,} bytes of HTML" if ok else "no HTML written")]


def check_compare(doc: dict, raws: list[sweep_raw.Raw]) -> list[tuple[str, str]]:
    """Each input's total and busy time, and the first row's time per input (a kernel under a
    scope can take no more than the kernel's time in the whole file)."""
    out = []
    for raw, given, line in zip(raws, doc.get("inputs") or [], doc.get("timeline") or []):
        total = sum(op.end_ns - op.start_ns for op in raw.ops)
        busy = sweep_raw.union_ns([(op.start_ns, op.end_ns) for op in raw.ops])
        out.append((_v(close(given["total_ns"], total) and close(line["busy_ns"], busy)),
                    f"{given['label'][:24]}: total {ms(given['total_ns'])} vs raw {ms(total)}, "
                    f"busy {ms(line['busy_ns'])} vs raw {ms(busy)}"))
    rows = doc.get("rows") or []
    if rows:
        for raw, given in zip(raws, doc.get("inputs") or []):
            shown = rows[0].get(f"time_ns[{given['label']}]")
            if shown is None:
                continue
            raw_ns, _ = sweep_raw.named_total(raw, rows[0]["kernel"])
            ok = close(shown, raw_ns) if not rows[0].get("scope") else shown <= raw_ns * (1 + REL_TOL)
            out.append((_v(ok), f"'{rows[0]['kernel'][:30]}' {ms(shown)} vs raw {ms(raw_ns)}"))
    return out


# --- the first finding in the text -----------------------------------------------------------


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def check_finding(finding: str, raw: sweep_raw.Raw) -> list[tuple[str, str]]:
    out = []
    if m := re.search(r"host-bound(?: in)? \(?(\d+) of (\d+)", finding):
        facts = [sweep_raw.window(sweep_raw.step_ops(raw, s)) for s in raw.steps] or [sweep_raw.window(raw.ops)]
        facts = [f for f in facts if f["span_ns"]]
        host = sum(f["host_caused_ns"] >= 0.10 * f["span_ns"] for f in facts)
        out.append((_v(int(m.group(1)) <= host and host > 0),
                    f"host-bound {m.group(1)} of {m.group(2)}: raw host-caused idle >= 10% in {host} of {len(facts)}"))
    if m := re.search(r"GPU idles ([\d,.]+) ms per step of ([\d,.]+) ms", finding):
        idle = [_mean_idle_ms(raw, pick) for pick in (sweep_raw.step_ops, sweep_raw.step_ops_by_time)]
        ok = any(close(_num(m.group(1)), i) for i in idle)
        out.append((_v(ok), f"idle {m.group(1)} ms per step vs raw {idle[0]:,.3f} ms (launched in the step) "
                            f"or {idle[1]:,.3f} ms (running in it)"))
    if m := re.search(r"(\d[\d,]*) of the (\d[\d,]*) kernels it launched one by one.*?shorter than their own launch", finding):
        short = sum(1 for op in raw.ops if op.kind == "kernel" and op.launch_dur_ns is not None
                    and op.end_ns - op.start_ns < op.launch_dur_ns)
        steps = max(len([s for s in raw.steps if sweep_raw.step_ops(raw, s)]), 1)
        out.append((_v(close(_num(m.group(1)), short / steps, 0.05)),
                    f"{m.group(1)} kernels shorter than their launch vs raw {short / steps:,.0f} per step"))
    if m := re.search(r"reserves ([\d,.]+) (MiB|GiB) at its peak for ([\d,.]+) (MiB|GiB) allocated", finding):
        scale = {"MiB": 2**20, "GiB": 2**30}
        peak = max(raw.memory, key=lambda s: s[1]) if raw.memory else None
        if peak:
            ok = close(_num(m.group(3)) * scale[m.group(4)], peak[1], 0.01)
            out.append((_v(ok), f"peak allocated {m.group(3)} {m.group(4)} vs raw {peak[1] / 2**20:,.2f} MiB "
                                f"(reserved then {peak[2] / 2**20:,.2f} MiB)"))
        # Totals say how much is reserved and not allocated, not whether a block could use it.
        if "cannot use" in finding:
            out.append(("misleading", "'cannot use (fragmentation)': the totals show reserved minus allocated, "
                                      "not block sizes, so not that the cached memory is unusable"))
    if m := re.search(r"^(\S+) loses ([\d,.]+) ms to its roofline on rank \d+ \((\d[\d,]*) calls, ([\d,.]+) ms", finding):
        shown_ns, calls = sweep_raw.named_total(raw, m.group(1))
        ok = calls == _num(m.group(3)) and close(_num(m.group(4)) * 1e6, shown_ns)
        out.append((_v(ok), f"{m.group(1)[:40]}: {m.group(3)} calls, {m.group(4)} ms vs raw {calls} calls, {ms(shown_ns)}"))
    if m := re.search(r"saves ([\d,.]+) ms of the ([\d,.]+) ms trace, its first op \(or that op's launch\)", finding):
        first = min(raw.ops, key=lambda op: op.start_ns)
        start = min(first.start_ns, first.launch_ns if first.launch_ns is not None else first.start_ns)
        span = max(op.end_ns for op in raw.ops) - start
        out.append((_v(close(_num(m.group(2)) * 1e6, span)), f"trace {m.group(2)} ms vs raw {ms(span)}"))
    if m := re.search(r"([\d,.]+) ms of it waiting on another stream, an event or a peer", finding):
        # Such a wait needs a second stream, an event wait or a collective in the file.
        comm = any(re.search(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter", op.name, re.I) for op in raw.ops)
        has = len(raw.streams) > 1 or raw.event_waits or comm
        out.append(("true" if has else "misleading", f"{m.group(1)} ms waiting: raw streams {len(raw.streams)}, "
                                                     f"event or sync waits {raw.event_waits}, collectives {comm}"))
    if "no memory events" in finding:
        out.append((_v(not raw.memory), f"raw [memory] samples: {len(raw.memory)}"))
    if "no steps" in finding:
        out.append((_v(not raw.steps), f"raw ProfilerStep ranges: {len(raw.steps)}"))
    return out


def _mean_idle_ms(raw: sweep_raw.Raw, pick) -> float:
    facts = [sweep_raw.window(pick(raw, s)) for s in raw.steps] or [sweep_raw.window(raw.ops)]
    facts = [f for f in facts if f["span_ns"]]
    return sum(f["span_ns"] - f["busy_ns"] for f in facts) / max(len(facts), 1) / 1e6


def _v(ok: bool) -> str:
    return "true" if ok else "false"


CHECKS = {"breakdown": check_breakdown, "steps": check_steps, "idle": check_idle,
          "whatif": check_whatif, "roofline": check_roofline, "memory": check_memory}


def _read(out: Path, stem: str) -> tuple[int, str, str]:
    rc = int((out / f"{stem}.rc").read_text()) if (out / f"{stem}.rc").exists() else -1
    text = (out / f"{stem}.out").read_text() if (out / f"{stem}.out").exists() else ""
    err = (out / f"{stem}.err").read_text() if (out / f"{stem}.err").exists() else ""
    return rc, text, err


def _one(out: Path, command: str, raw: sweep_raw.Raw) -> dict:
    rc_json, body, err = _read(out, f"{command}.json")
    rc_text, text, err_text = _read(out, f"{command}.text")
    finding = first_finding(text)
    if rc_json != 0 or rc_text != 0:
        line = (err or err_text).strip().splitlines()[-1:] or [""]
        crashed = "Traceback" in err + err_text
        return {"claim": line[0][:200], "verdict": "false" if crashed else "unsupported",
                "evidence": f"exit {rc_json}/{rc_text}" + (" with a traceback" if crashed else "")}
    try:
        doc = json.loads(body)
    except ValueError as exc:
        return {"claim": body[:100], "verdict": "false", "evidence": f"not strict JSON: {exc}"}
    checked = CHECKS[command](doc, raw, text) if command == "whatif" else CHECKS[command](doc, raw)
    results = checked + (check_finding(finding, raw) if finding else [])
    verdict, evidence = worst(results)
    return {"claim": finding or _top_claim(command, doc), "verdict": verdict, "evidence": evidence}


def _top_claim(command: str, doc: dict) -> str:
    for key in ("breakdown", "steps", "rows", "scenarios"):
        if doc.get(key):
            return f"first row: {json.dumps(doc[key][0])[:160]}"
    return f"{command}: no rows"


def check_all(out_root: Path) -> list[dict]:
    rows = []
    for out in sorted(p for p in out_root.iterdir() if p.is_dir()):
        paths = [Path(p) for p in (out / "trace.txt").read_text().split("\n")]
        raws = [sweep_raw.load(p) for p in paths]
        base = {"trace": out.name, "paths": [str(p) for p in paths], "format": raws[0].format,
                "device": (raws[0].devices or ["(none named)"])[0] or "(empty name)"}
        if out.name.startswith("compare__"):
            rows.append(base | {"command": "compare"} | _compare(out, raws))
            continue
        if raws[0].format == "other":
            rows += [base | {"command": c} | _unsupported(out, c) for c in (*CHECKS, "report")]
            continue
        rows += [base | {"command": c} | _one(out, c, raws[0]) for c in CHECKS]
        rc, text, err = _read(out, "report.text")
        verdict, evidence = worst(check_report(out)) if rc == 0 else ("false" if "Traceback" in err else "unsupported", err.strip()[-200:])
        rows.append(base | {"command": "report", "claim": (text.strip().splitlines() or [""])[-1][:160],
                            "verdict": verdict, "evidence": evidence})
    return rows


def _unsupported(out: Path, command: str) -> dict:
    stem = f"{command}.text"
    rc, text, err = _read(out, stem)
    crashed = "Traceback" in err
    line = (err.strip().splitlines() or [""])[-1][:200]
    ok = rc != 0 and not crashed and "tracelab: error" in err
    return {"claim": line, "verdict": "unsupported" if ok else "false",
            "evidence": "refused in one line, a format tracelab does not read" if ok else f"exit {rc}: claims on a file it cannot read"}


def _compare(out: Path, raws: list[sweep_raw.Raw]) -> dict:
    rc, body, err = _read(out, "compare.json")
    _, text, _ = _read(out, "compare.text")
    if rc != 0:
        return {"claim": err.strip()[-200:], "verdict": "false" if "Traceback" in err else "unsupported", "evidence": f"exit {rc}"}
    verdict, evidence = worst(check_compare(json.loads(body), raws))
    return {"claim": first_finding(text) or "", "verdict": verdict, "evidence": evidence}


def markdown(rows: list[dict], sources: dict) -> str:
    lines = ["| trace | source | licence | format | device | command | first claim | verdict | evidence |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        src = sources.get(r["paths"][0], {})
        cells = [r["trace"], src.get("source", ""), src.get("licence", ""), r["format"], r["device"],
                 r["command"], r["claim"][:220], f"**{r['verdict']}**", r["evidence"][:300]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ORDER}
    traces = len({r["trace"] for r in rows if r["command"] != "compare"})
    lines.append("")
    lines.append(f"Totals: {traces} traces, {len(rows)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    return "\n".join(lines) + "\n"
