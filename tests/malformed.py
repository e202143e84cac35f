"""Malformed traces made from the small good ones in tests/data, written into a test's
tmp_path (never committed): one change each, so a test can say which field must be named.

Each maker takes the folder to write into and returns the file's path."""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Callable

from helpers import run_cli, run_cli_output  # noqa: F401  (malformed cases run through them: m.run_cli)

DATA = Path(__file__).resolve().parent / "data"
KINETO = DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"
HATCHET = DATA / "decode-1gpu-proton" / "rank0.hatchet"
NSYS = DATA / "decode-1gpu-nsys" / "rank0.sqlite"
INT64_MAX = 2**63 - 1


def kineto_doc() -> dict[str, Any]:
    return json.loads(gzip.decompress(KINETO.read_bytes()))


def hatchet_doc() -> list:
    return json.loads(HATCHET.read_bytes())


def first(events: list[dict], cat: str) -> dict:
    return next(e for e in events if e.get("cat") == cat)


def kernel_nodes(node: dict) -> list[dict]:
    """The hatchet nodes that carry a device id (the parser's kernel rows), depth first."""
    found = [node] if "device_id" in node.get("metrics", {}) else []
    for child in node.get("children", []):
        if isinstance(child, dict):
            found += kernel_nodes(child)
    return found


def write_json(folder: Path, name: str, doc: Any, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path = folder / name
    path.write_bytes(gzip.compress(data, 1) if gz else data)
    return path


def edited(good: Callable[[], Any], change: Callable[[Any], Any], name: str) -> Callable[[Path], Path]:
    """A maker: the good document with `change(doc)` applied, written as `name`."""
    def make(folder: Path) -> Path:
        doc = good()
        change(doc)
        return write_json(folder, name, doc)
    return make


def kineto(change: Callable[[dict], Any], name: str = "rank0.pt.trace.json") -> Callable[[Path], Path]:
    """The good Kineto trace with `change(doc)` applied."""
    return edited(kineto_doc, change, name)


def kineto_event(cat: str, **fields: Any) -> Callable[[Path], Path]:
    """The first event of `cat` with `fields` replaced (a key `args_x` sets args["x"])."""
    def change(doc: dict) -> None:
        event = first(doc["traceEvents"], cat)
        for key, value in fields.items():
            if key.startswith("args_"):
                event["args"][key[5:]] = value
            else:
                event[key] = value
    return kineto(change)


def hatchet(change: Callable[[list], Any], name: str = "rank0.hatchet") -> Callable[[Path], Path]:
    """The good proton profile with `change(doc)` applied."""
    return edited(hatchet_doc, change, name)


def hatchet_metric(**metrics: Any) -> Callable[[Path], Path]:
    """The first kernel node with `metrics` replaced (keys with spaces: time_ns -> "time (ns)")."""
    names = {"time_ns": "time (ns)"}
    def change(doc: list) -> None:
        node = kernel_nodes(doc[0])[0]
        node["metrics"].update({names.get(k, k): v for k, v in metrics.items()})
    return hatchet(change)


def nsys(*statements: str, name: str = "rank0.sqlite") -> Callable[[Path], Path]:
    """The good nsys export with SQL statements run on a copy."""
    def make(folder: Path) -> Path:
        path = folder / name
        shutil.copy(NSYS, path)
        with sqlite3.connect(path) as db:
            for sql in statements:
                db.execute(sql)
        db.close()
        return path
    return make


def first_row(table: str, where: str = "1") -> str:
    return f"rowid = (SELECT MIN(rowid) FROM {table} WHERE {where})"


def nsys_value(table: str, column: str, sql_value: str, where: str = "1") -> Callable[[Path], Path]:
    """One cell of the first row of `table` set to a SQL expression (typed as SQLite stores it);
    the table is copied first without its NOT NULL constraints (CREATE TABLE AS keeps none)."""
    return nsys(*loosen(table), f"UPDATE {table} SET {column} = {sql_value} WHERE {first_row(table, where)}")


def loosen(table: str) -> list[str]:
    """SQL that copies `table` without its constraints (CREATE TABLE AS keeps none)."""
    return [f"CREATE TABLE loose AS SELECT * FROM {table}", f"DROP TABLE {table}",
            f"ALTER TABLE loose RENAME TO {table}"]


def raw(data: bytes, name: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        (path := folder / name).write_bytes(data)
        return path
    return make


def with_bytes(maker: Callable[[Path], Path], edit: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    """A maker whose output bytes are then edited (for what json.dumps cannot write)."""
    def make(folder: Path) -> Path:
        path = maker(folder)
        path.write_bytes(edit(path.read_bytes()))
        return path
    return make
