"""Every per-rank digest (reports/session.RANK_DIGESTS) made by this checkout and by another
(e.g. main, `git worktree add --detach /tmp/base main`) on every trace file: each must be equal,
tables by `DataFrame.equals` with the same dtypes, arrays element for element (NaN equal to NaN),
dataclasses field by field; a trace one refuses the other must refuse in the same words.

    python benchmarks/compare_digests.py --base /tmp/base [PATHS...]

PATHS default to tests/data and ../shared/traces; every trace file under them (tracelab's own
choice, loading.expand) is read on its own, in one process per checkout, the cache off. Prints
one line per trace, then a count; exit 1 on any difference.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "tests/data", REPO.parent / "shared/traces"]


def _plain(obj):
    """The digest with its own classes replaced by (class name, fields): the parent compares
    both checkouts' values without importing either's classes."""
    import numpy as np
    import pandas as pd

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__, {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, (pd.DataFrame, pd.Series, np.ndarray)) or obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, (np.generic,)):
        return obj.item()
    return (type(obj).__name__, repr(obj))


def _read_all(repo: Path, paths: list[Path], out: Path) -> None:
    """In a child: each file's digests through that checkout, pickled to `out`."""
    from bench_stages import use_checkout

    use_checkout(repo)
    os.environ["TRACELAB_CACHE"] = "0"
    from tracelab.ingest import loading
    from tracelab.core.errors import TracelabError
    from tracelab.reports.ranks import RANK_DIGESTS

    assert Path(loading.__file__).resolve().is_relative_to(repo.resolve()), loading.__file__
    files = sorted({f for d in paths for f in loading.expand([d])})
    results = {}
    for f in files:
        try:
            profiles = loading.load_many([f], workers=1, reduce=RANK_DIGESTS, keep_events=False)
            results[str(f)] = [{n: _plain(v) for n, v in p.summary.items()} for p in profiles]
        except TracelabError as e:
            results[str(f)] = str(e)
    out.write_bytes(pickle.dumps(results))


def same(a, b) -> bool:
    """Deep equality of two _plain values (module docstring)."""
    import numpy as np
    import pandas as pd

    if type(a) is not type(b):
        return False
    if isinstance(a, pd.DataFrame):
        return a.equals(b) and list(a.columns) == list(b.columns) and list(a.dtypes) == list(b.dtypes) \
            and a.index.equals(b.index)
    if isinstance(a, pd.Series):
        return a.equals(b) and a.dtype == b.dtype and a.index.equals(b.index) and a.name == b.name
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return all(same(x, y) for x, y in zip(a.tolist(), b.tolist())) if a.dtype == object else bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    return a == b


def _differing(a, b) -> list[str]:
    if isinstance(a, str) or isinstance(b, str) or len(a) != len(b):
        return ["the whole file"]
    return sorted({n for x, y in zip(a, b) for n in set(x) | set(y) if n not in x or n not in y or not same(x[n], y[n])})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--base", type=Path, required=True, help="the other checkout")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    if a.child:
        return _read_all(Path(a.child[0]), a.paths, Path(a.child[1]))
    from compare_parse import in_each_checkout

    got = in_each_checkout(__file__, a.paths, a.base)
    files = sorted(set(got["this"]) | set(got["base"]))
    bad = 0
    for f in files:
        this, base = got["this"].get(f, "(not read)"), got["base"].get(f, "(not read)")
        diff = _differing(this, base) if not (isinstance(this, str) and this == base) else []
        bad += bool(diff)
        what = f"refused: {this[:80]}" if isinstance(this, str) else f"{len(this)} rank(s)"
        print(f"{'same' if not diff else 'DIFFERENT ' + ','.join(diff)}  {f}  ({what})")
    print(f"{len(files) - bad} of {len(files)} traces the same, {bad} different")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
