"""Every Kineto trace read by this checkout and by another (e.g. main, `git worktree add --detach
/tmp/base main`): events (classified), host and memory frames and meta must be equal
(`DataFrame.equals`, `==`), and a trace one refuses the other must refuse in the same words.

    python benchmarks/compare_parse.py --base /tmp/base [PATHS...]

PATHS default to tests/data and ../shared/traces/hta; every *.json and *.json.gz under them
is tried. Prints one line per trace, then a count; exit 1 on any difference.
"""
from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "tests/data", REPO.parent / "shared/traces/hta"]


def _read_all(repo: Path, files: list[Path], out: Path) -> None:
    """In a child: each file through that checkout's Kineto parser, pickled to `out`."""
    from bench_stages import use_checkout

    use_checkout(repo)
    from tracelab.core import classify
    from tracelab.core.errors import TracelabError
    from tracelab.parsers import chrome

    assert Path(chrome.__file__).resolve().is_relative_to(repo.resolve()), chrome.__file__
    results = {}
    for f in files:
        try:
            p = chrome.read(f)
            meta = p.meta.to_dict() if hasattr(p.meta, "to_dict") else p.meta  # Meta, or the dict it once was
            results[str(f)] = (classify.classified(p.events), p.host, p.memory, meta)
        except TracelabError as e:
            results[str(f)] = str(e)
    out.write_bytes(pickle.dumps(results))


def in_each_checkout(script: str, paths: list[Path], base: Path) -> dict[str, dict]:
    """What `script PATHS --base BASE --child REPO OUT` pickles to OUT for this checkout ("this")
    and for `base` ("base"), each read in a child process of its own."""
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, repo in (("this", REPO), ("base", base)):
            out = Path(tmp) / name
            subprocess.run([sys.executable, script, *map(str, paths), "--base", str(base), "--child", str(repo),
                            str(out)], check=True, cwd=tmp)
            got[name] = pickle.loads(out.read_bytes())
    return got


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    frames_equal = all((x is None and y is None) or (x is not None and y is not None and x.equals(y)
                       and list(x.dtypes) == list(y.dtypes) and _same_categories(x, y)) for x, y in zip(a[:3], b[:3]))
    return frames_equal and a[3] == b[3]


def _same_categories(x, y) -> bool:
    """Each categorical column's categories in the same order and of the same dtype (equals and
    dtype == take them as a set), and its codes of the same width."""
    import pandas as pd

    return all(list(x[c].cat.categories) == list(y[c].cat.categories)
               and x[c].cat.categories.dtype == y[c].cat.categories.dtype and x[c].cat.codes.dtype == y[c].cat.codes.dtype
               for c in x.columns if isinstance(x[c].dtype, pd.CategoricalDtype))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--base", type=Path, required=True, help="the other checkout")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--new-meta", action="append", default=[], metavar="KEY",
                   help="a meta key this checkout adds: left out of the comparison (repeatable)")
    a = p.parse_args()
    a.paths = [d.resolve() for d in a.paths]  # the children run in a directory of their own
    files = sorted(f for d in a.paths for f in ([d] if d.is_file() else d.rglob("*.json*"))
                   if f.name.endswith((".json", ".json.gz")))
    if a.child:
        return _read_all(Path(a.child[0]), files, Path(a.child[1]))
    got = in_each_checkout(__file__, a.paths, a.base)  # (--new-meta is not passed on: the children read all)
    bad = 0
    for f in map(str, files):
        this, base = got["this"][f], got["base"][f]
        if not isinstance(this, str):
            this = (*this[:3], {k: v for k, v in this[3].items() if k not in a.new_meta})
        same = _same(this, base)
        bad += not same
        what = f"refused: {this[:80]}" if isinstance(this, str) else f"{len(this[0]):,} rows"
        print(f"{'same' if same else 'DIFFERENT'}  {f}  ({what})")
    print(f"{len(files) - bad} of {len(files)} traces the same, {bad} different")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
