"""limits.read_trace_bytes with ISA-L's inflate (the optional `isal`) and with the stdlib's
zlib: the same bytes, and a damaged gzip named in zlib's words either way."""
from __future__ import annotations

import gzip
import zlib

import pytest

from tracelab.core import limits
from tracelab.core.errors import TraceFormatError
from tracelab.core.options import Options, applied

isal_zlib = pytest.importorskip("isal.isal_zlib")

BODY = b'{"traceEvents": [' + b",".join(b'{"ph": "X", "ts": %d}' % i for i in range(50_000)) + b"]}"


def _both(path, monkeypatch):
    fast = limits.read_trace_bytes(path)
    monkeypatch.setattr(limits, "_isal_zlib", None)
    plain = limits.read_trace_bytes(path)
    monkeypatch.setattr(limits, "_isal_zlib", isal_zlib)
    return fast, plain


def test_same_bytes_one_and_several_members(tmp_path, monkeypatch):
    one, several = tmp_path / "one.json.gz", tmp_path / "several.json.gz"
    one.write_bytes(gzip.compress(BODY))
    several.write_bytes(gzip.compress(BODY[:1000]) + gzip.compress(BODY[1000:70_000]) + gzip.compress(BODY[70_000:]))
    for path in (one, several):
        fast, plain = _both(path, monkeypatch)
        assert fast == plain == BODY


@pytest.mark.parametrize("damage", ["truncated", "flipped", "too_big"])
def test_damage_named_as_zlib_names_it(tmp_path, monkeypatch, damage):
    data = bytearray(gzip.compress(BODY))
    if damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "flipped":
        data[40:60] = bytes(20)
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(data))
    bound = Options(max_trace_bytes=len(BODY) - 1) if damage == "too_big" else Options()
    errors = []
    for inflater in (isal_zlib, None):
        monkeypatch.setattr(limits, "_isal_zlib", inflater)
        with pytest.raises(TraceFormatError) as raised, applied(bound):
            limits.read_trace_bytes(path)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]
    if damage == "flipped":  # zlib's own words for the damage, not ISA-L's
        with pytest.raises(zlib.error) as plain:
            zlib.decompress(bytes(data), 16 + zlib.MAX_WBITS)
        assert str(plain.value) in errors[0]
