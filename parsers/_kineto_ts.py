"""`ts` of Kineto events, read exactly from its JSON text (parsers/_kineto_columns): a float
cannot hold epoch microseconds to the ns."""
from __future__ import annotations

from decimal import Decimal
from typing import Sequence

import msgspec
import numpy as np

from tracelab.core import limits

_POW10 = 10 ** np.arange(20, dtype=np.uint64)
_DIGIT, _DOT, _MINUS, _SEP = ord("0"), ord("."), ord("-"), 0  # NUL: in no valid JSON value


def ts_ns(texts: Sequence[msgspec.Raw | bytes]) -> list[int]:
    """`ts` texts (JSON values, microseconds) in integer ns, exact as written, rounded half
    to even past the ns: plain decimals (what Kineto writes: ints, or 3 decimals) in numpy,
    texts of one length and layout as one matrix (`_aligned_ns`), the rest byte by byte
    (`_plain_ns`); others (exponents, more decimals, strings) through Decimal. ValueError
    for a ts that is no number, or one beyond +-limits.MAX_TIME_NS (damage, not a time)."""
    return _ts_array(texts).tolist()


def _ts_array(texts: Sequence[msgspec.Raw | bytes]) -> np.ndarray:
    """ts_ns() as an int64 array."""
    if not texts:
        return np.zeros(0, dtype=np.int64)
    text = np.frombuffer(b"\0".join(texts) + b"\0", dtype=np.uint8)  # NUL: in no valid JSON value
    ns = _aligned_ns(text, len(texts), len(texts[0]))
    if ns is not None:
        return ns
    ns, plain = _plain_ns(text, len(texts))
    out = ns.astype(np.int64)
    for i in np.flatnonzero(~plain).tolist():
        out[i] = _decimal_ns(texts[i])
    return out


def _aligned_ns(text: np.ndarray, n: int, width: int) -> np.ndarray | None:
    """ns of n NUL-ended texts that all are `width` long, digits in the same columns and, if
    any, the decimal point in the same column, at most 3 from the end; None for any other."""
    if len(text) != n * (width + 1):
        return None
    chars = text.reshape(n, width + 1)
    if chars[:, width].any():  # n NULs in all, each after `width` bytes: every text is that long
        return None
    digits = chars[:, :width] - _DIGIT  # uint8: wraps below "0"
    is_digit = digits[0] < 10  # the first text's digit columns; every text's, or None below
    dots = np.flatnonzero(~is_digit)
    if len(dots) > 1 or not (digits[:, is_digit] < 10 if len(dots) else digits < 10).all():
        return None  # (a whole-array test: numpy's per-column reductions cost ~10x more here)
    if len(dots) and not (chars[:, dots[0]] == _DOT).all():
        return None
    decimals = width - 1 - int(dots[0]) if len(dots) else 0
    n_digits = width - len(dots)
    if decimals > 3 or n_digits - decimals + 3 > 19:
        return None  # at most 19 digits of ns: below 1e19, within uint64
    weights = np.zeros(width, dtype=np.uint64)  # each digit column's power of ten, in ns
    weights[is_digit] = _POW10[3 - decimals:3 - decimals + n_digits][::-1]
    ns = digits.astype(np.uint64) @ weights  # every partial sum < 1e19: no wrap
    return ns.astype(np.int64) if not len(ns) or ns.max() <= limits.MAX_TIME_NS else None


def _plain_ns(text: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """ns (uint64) of n NUL-ended numbers, and which were plain: [-]digits[.digits] with at
    most 3 decimals and at most limits.MAX_TIME_NS ns; the others' ns are meaningless."""
    sep = text == _SEP
    ends = np.flatnonzero(sep)  # one per text: NUL is in no valid JSON value
    starts = np.r_[0, ends[:-1] + 1]
    digit = (text - _DIGIT) < 10  # uint8 wraps below "0"
    dot, minus = text == _DOT, text == _MINUS
    odd = np.add.reduceat((~(digit | dot | minus | sep)).view(np.uint8), starts) > 0
    negative = minus[starts]
    odd |= np.add.reduceat(minus.view(np.uint8), starts) > negative
    odd |= np.add.reduceat(dot.view(np.uint8), starts) > 1
    through = np.cumsum(digit, dtype=np.int64)  # digits up to and including each byte
    n_digits = np.diff(np.r_[0, through[ends]])
    decimals = np.zeros(n, dtype=np.int64)
    dots = np.flatnonzero(dot)
    owner = np.searchsorted(ends, dots)
    decimals[owner] = through[ends[owner]] - through[dots]
    odd |= (decimals > 3) | (n_digits == 0) | (n_digits - decimals + 3 > 19)
    after = through[ends][np.repeat(np.arange(n), np.diff(np.r_[-1, ends]))] - through  # digits after each byte
    places = np.where(digit, np.minimum(after, 19), 0)
    value = np.add.reduceat(np.where(digit, (text - _DIGIT).astype(np.uint64), 0) * _POW10[places], starts)
    ns = value * _POW10[np.clip(3 - decimals, 0, 3)]
    odd |= ns > limits.MAX_TIME_NS
    ns = np.where(negative, (0 - ns.view(np.int64)).view(np.uint64), ns)
    return ns, ~odd


def _decimal_ns(text: msgspec.Raw | bytes) -> int:
    try:
        us = msgspec.json.decode(text, type=Decimal)
        ns = int(us.scaleb(3).to_integral_value())
    except msgspec.ValidationError as e:
        raise ValueError(f"ts: {e}") from None
    except (ArithmeticError, ValueError):  # Infinity, or an exponent past Decimal's range
        ns = limits.MAX_TIME_NS + 1
    if not -limits.MAX_TIME_NS <= ns <= limits.MAX_TIME_NS:
        raise ValueError(f"ts {bytes(text).decode(errors='replace')[:40]} us is beyond +-2**62 ns")
    return ns
