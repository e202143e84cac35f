"""Trust boundaries, the file side (docs/trust.md): nothing another user put in a cache folder is
ever unpickled, no cache entry is read through a link, a FIFO or a hard link, eviction deletes
only entries tracelab marked as its own, the temporary-file sweep only what tracelab left, and
`-o` replaces only a regular file that tracelab does not read. Table-driven: each case plants
its files (another user simulated by chown to NOBODY: the tests run as root), then the load or
the command runs; a planted pickle that ran would create its marker file."""
from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import socket
import stat
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

import malformed as m
import tracelab
import tracelab.ingest.loading
from promise import one_process
from tracelab.ingest import cache, cachedir, digest_cache
from tracelab.core.options import Options
from tracelab.reports import ranks as session

NOBODY = 65534  # another user
TRACE = m.DATA / "decode-1gpu-torch" / "rank0.pt.trace.json.gz"
CHEAP = ("sums", "timeline", "has_times")
HOUR_AGO = time.time() - 3600
DEAD_PID = 4194304  # above Linux's largest pid_max: no process has it

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user is simulated with chown (root only)")


@dataclass
class Plant:
    tmp: Path
    trace: Path
    cache: Path  # TRACELAB_CACHE_DIR
    marker: Path  # made by a planted pickle that ran
    kept: list[Path] = field(default_factory=list)  # must be there after, unchanged
    parquet: bool = False  # the case is about the Parquet cache (tracelab.load) rather than the digests'


def _reduce():
    return session.rank_digests(CHEAP)


def _digest_key(p: Plant) -> str:
    return digest_cache.key(p.trace, _reduce())


def _parquet_key(p: Plant) -> str:
    import tracelab.parsers.chrome as chrome

    return cache.key(p.trace, chrome.__file__)


def _call(module: str, name: str, arg) -> bytes:
    """A pickle (protocol 4, a dotted name allowed) whose load calls module.name(arg)."""
    def text(s: str) -> bytes:
        return b"\x8c" + bytes([len(s.encode())]) + s.encode()

    return b"\x80\x04" + text(module) + text(name) + b"\x93" + text(arg) + b"\x85R."


def _entry(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=32).digest() + payload


def _forged(p: Plant) -> bytes:
    """A digest entry with a right checksum whose pickle runs `touch marker`."""
    return _entry(_call("posix", "system", f"touch {p.marker}"))


def _own_entry(p: Plant, name: str, files: dict[str, bytes], mark: bool = True) -> Path:
    folder = p.cache / name
    folder.mkdir(parents=True, mode=0o700)
    for file, data in files.items():
        (folder / file).write_bytes(data)
    if mark:
        (folder / cachedir.MARK).write_bytes(b"")
    return folder


def _shared(p: Plant) -> None:
    """The cache folder is a shared one (mode 1777) of another user's."""
    p.cache.mkdir(exist_ok=True)
    os.chown(p.cache, NOBODY, NOBODY)
    os.chmod(p.cache, 0o1777)


def _plant_in_shared(p: Plant, make) -> None:
    """Another user's entry (folder theirs) in a shared cache folder; `make(file)` plants the file."""
    _shared(p)
    entry = p.cache / _digest_key(p)
    entry.mkdir()
    make(entry / digest_cache.FILE)
    os.chown(entry, NOBODY, NOBODY)


def _victims_forged_file(p: Plant) -> Path:
    """A file this user owns holding a forged entry (its bytes chosen by another)."""
    (forged := p.tmp / "downloads" / "notes.bin").parent.mkdir()
    forged.write_bytes(_forged(p))
    p.kept.append(forged)
    return forged


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _runs_folder(p: Plant) -> None:
    """TRACELAB_CACHE_DIR set to the user's folder of runs, the input's own among them."""
    runs = p.tmp / "runs"
    for name in ("run-a", "run-b", "0123456789abcdef0123456789abcdef"):
        shutil.copytree(TRACE.parent, runs / name)
        p.kept.extend((runs / name).iterdir())
    os.utime(runs / "run-a", (HOUR_AGO, HOUR_AGO))
    p.trace = runs / "run-b" / TRACE.name
    p.cache = runs
    os.environ["TRACELAB_CACHE_MAX_BYTES"] = "1"


def _stale_user_folder(p: Plant) -> None:
    p.cache.mkdir(mode=0o700)
    (old := p.cache / ".tmp-old").mkdir()
    (old / "thesis.tex").write_text("mine")
    os.utime(old, (HOUR_AGO, HOUR_AGO))
    p.kept.append(old / "thesis.tex")
    os.environ["TRACELAB_CACHE_MAX_BYTES"] = "1"


def _evict_unmarked(p: Plant, how: str) -> None:
    """An entry-like folder that tracelab did not mark (or another user's), to be evicted by size."""
    p.cache.mkdir(mode=0o700)
    folder = _own_entry(p, "0123456789abcdef0123456789abcdef", {"meta.json": b"[]", "0.parquet": b"x" * 4096},
                        mark=how == "another user's")
    if how == "mark a link":
        (folder / cachedir.MARK).symlink_to(p.tmp / "elsewhere")
    if how == "another user's":
        os.chown(folder, NOBODY, NOBODY)
        os.chown(folder / cachedir.MARK, NOBODY, NOBODY)
    os.utime(folder, (HOUR_AGO, HOUR_AGO))
    p.kept.append(folder / "0.parquet")
    os.environ["TRACELAB_CACHE_MAX_BYTES"] = "1"


def _another_users_subfolder(p: Plant, link: bool) -> None:
    """In a shared cache folder, tracelab-UID made first by another user (or a link to a folder
    of the victim's holding a forged entry)."""
    _shared(p)
    sub = p.cache / f"tracelab-{os.geteuid()}"
    target = p.tmp / "victim-folder" if link else sub
    target.mkdir(mode=0o700)
    (target / _digest_key(p)).mkdir(mode=0o700)
    (target / _digest_key(p) / digest_cache.FILE).write_bytes(_forged(p))
    (target / _digest_key(p) / cachedir.MARK).write_bytes(b"")
    if link:
        sub.symlink_to(target)
    else:
        for f in (sub, sub / _digest_key(p), sub / _digest_key(p) / digest_cache.FILE):
            os.chown(f, NOBODY, NOBODY)


def _in_private(p: Plant, make) -> None:
    """The user's private cache folder holds an entry whose file `make(file)` plants."""
    p.cache.mkdir(mode=0o700)
    entry = _own_entry(p, _digest_key(p), {})
    make(entry / digest_cache.FILE)


def _entry_link(p: Plant) -> None:
    p.cache.mkdir(mode=0o700)
    elsewhere = p.tmp / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / digest_cache.FILE).write_bytes(_forged(p))
    (elsewhere / cachedir.MARK).write_bytes(b"")
    (p.cache / _digest_key(p)).symlink_to(elsewhere)


def _entry_folder_not_private(p: Plant, how: str) -> None:
    _in_private(p, lambda f: f.write_bytes(_forged(p)))
    entry = p.cache / _digest_key(p)
    if how == "another user's":
        os.chown(entry, NOBODY, NOBODY)
    else:
        os.chmod(entry, 0o777)


def _parquet_entry(p: Plant, make) -> None:
    """A Parquet entry (meta.json, 0.parquet) whose file `make(entry)` replaces."""
    p.parquet = True
    p.cache.mkdir(mode=0o700)
    entry = _own_entry(p, _parquet_key(p), {"meta.json": b"[]"})
    make(entry)


def _part_link(p: Plant, entry: Path) -> None:
    (other := p.tmp / "other.parquet").write_bytes(b"PAR1")
    (entry / "meta.json").write_text('[{"path": "x", "source": "kineto", "rank": 0, "world_size": 1}]')
    (entry / "0.parquet").symlink_to(other)


def _fsize_limit(p: Plant) -> None:
    """Every cache write fails (a full disk, `ulimit -f`): 64 KiB per file at most."""
    p.parquet = True
    os.environ["TRACELAB_TEST_FSIZE"] = str(64 * 1024)


def _rmtree_victim(p: Plant, file: Path) -> None:
    (victim := p.tmp / "victim").mkdir()
    (victim / "thesis.tex").write_text("the user's")
    p.kept.append(victim / "thesis.tex")
    file.write_bytes(_entry(_call("shutil", "rmtree", str(victim))))


def _own_link_to_private(p: Plant) -> None:
    (real := p.tmp / "real-cache").mkdir(mode=0o700)
    p.cache.symlink_to(real)


def _cache_is(p: Plant, kind: str) -> None:
    if kind == "a file":
        p.cache.write_text("the user's notes")
        p.kept.append(p.cache)
    elif kind == "a dangling link":
        p.cache.symlink_to(p.tmp / "nowhere")
    else:
        p.cache = Path("/proc/tracelab-cache")


# case -> what it plants (Plant); each: the load gives the right numbers, no planted pickle runs,
# no hang, every kept file as it was
CACHE_CASES = {
    "shared folder: another user's entry, a link to the victim's forged file": lambda p: _plant_in_shared(
        p, lambda f: f.symlink_to(_victims_forged_file(p))),
    "shared folder: another user's entry, a FIFO": lambda p: _plant_in_shared(p, _fifo),
    "shared folder: another user's entry, a forged file of theirs": lambda p: _plant_in_shared(
        p, lambda f: f.write_bytes(_forged(p))),
    "shared folder: tracelab-UID made first by another user": lambda p: _another_users_subfolder(p, link=False),
    "shared folder: tracelab-UID a link to the victim's folder": lambda p: _another_users_subfolder(p, link=True),
    "private: entry file a link to the victim's forged file": lambda p: _in_private(
        p, lambda f: f.symlink_to(_victims_forged_file(p))),
    "private: entry file a hard link to the victim's forged file": lambda p: _in_private(
        p, lambda f: os.link(_victims_forged_file(p), f)),
    "private: entry file a FIFO": lambda p: _in_private(p, _fifo),
    "private: entry file a dangling link": lambda p: _in_private(p, lambda f: f.symlink_to(p.tmp / "nowhere")),
    "private: entry file a folder": lambda p: _in_private(p, lambda f: f.mkdir()),
    "private: entry folder a link to a forged entry": _entry_link,
    "private: entry folder another user's": lambda p: _entry_folder_not_private(p, "another user's"),
    "private: entry folder writable by all": lambda p: _entry_folder_not_private(p, "0777"),
    "private: entry file another user's": lambda p: _in_private(
        p, lambda f: (f.write_bytes(_forged(p)), os.chown(f, NOBODY, NOBODY))),
    "pickle: os.system with a right checksum": lambda p: _in_private(p, lambda f: f.write_bytes(_forged(p))),
    "pickle: subprocess.Popen": lambda p: _in_private(
        p, lambda f: f.write_bytes(_entry(_call("subprocess", "Popen", f"/usr/bin/touch {p.marker}")))),
    "pickle: builtins.eval": lambda p: _in_private(
        p, lambda f: f.write_bytes(_entry(_call("builtins", "eval", f"open({str(p.marker)!r}, 'w')")))),
    "pickle: a dotted name through a tracelab module (tracelab.ingest.cache.os.system)": lambda p: _in_private(
        p, lambda f: f.write_bytes(_entry(_call("tracelab.ingest.cache", "os.system", f"touch {p.marker}")))),
    "pickle: shutil.rmtree of the user's folder": lambda p: _in_private(p, lambda f: _rmtree_victim(p, f)),
    "pickle: os.mkdir": lambda p: _in_private(p, lambda f: f.write_bytes(_entry(_call("os", "mkdir", str(p.marker))))),
    "entry of a newer version (a class this one lacks)": lambda p: _in_private(
        p, lambda f: f.write_bytes(_entry(_call("tracelab.core.schema", "DigestV9", "x")))),
    "entry with a wrong checksum": lambda p: _in_private(p, lambda f: f.write_bytes(b"\0" * 32 + b"x")),
    "entry truncated (right checksum)": lambda p: _in_private(
        p, lambda f: f.write_bytes(_entry(pickle.dumps(([1] * 100, [], "x"))[:-20]))),
    "entry empty": lambda p: _in_private(p, lambda f: f.write_bytes(b"")),
    "parquet: meta.json a FIFO": lambda p: _parquet_entry(p, lambda e: ((e / "meta.json").unlink(),
                                                                       os.mkfifo(e / "meta.json"))),
    "parquet: a part a link to another file": lambda p: _parquet_entry(p, lambda e: _part_link(p, e)),
    "parquet: cache writes past ulimit -f": _fsize_limit,
    "cache folder: a file": lambda p: _cache_is(p, "a file"),
    "cache folder: a dangling link": lambda p: _cache_is(p, "a dangling link"),
    "cache folder: cannot be made (/proc)": lambda p: _cache_is(p, "/proc"),
    "cache folder: the user's link to a private folder": _own_link_to_private,
    "eviction: TRACELAB_CACHE_DIR set to a folder of runs": _runs_folder,
    "eviction: a user's stale .tmp- folder": _stale_user_folder,
    "eviction: an entry-named folder without the mark": lambda p: _evict_unmarked(p, "no mark"),
    "eviction: an entry whose mark is a link": lambda p: _evict_unmarked(p, "mark a link"),
    "eviction: a marked entry of another user's": lambda p: _evict_unmarked(p, "another user's"),
}


@pytest.fixture
def plant(tmp_path, monkeypatch) -> Plant:
    monkeypatch.delenv("TRACELAB_CACHE", raising=False)
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "RACY_S", 0.01)
    monkeypatch.setattr(cachedir, "_unscanned_bytes", {})
    for name in ("TRACELAB_CACHE_MAX_BYTES", "TRACELAB_TEST_FSIZE"):
        monkeypatch.setenv(name, "")
    trace = Path(shutil.copy(TRACE, tmp_path / TRACE.name))
    time.sleep(0.05)
    return Plant(tmp_path, trace, tmp_path / "cache", tmp_path / "ran")


@pytest.fixture(scope="module")
def expected() -> tuple[pd.DataFrame, int]:
    """The digests and events of the trace, parsed with the caches off."""
    os.environ["TRACELAB_CACHE"] = "0"
    try:
        (digests,) = tracelab.load_many([TRACE], workers=1, reduce=_reduce(), keep_events=False)
        return digests.summary["sums"], len(tracelab.load(TRACE).events)
    finally:
        del os.environ["TRACELAB_CACHE"]


@contextmanager
def _unblocked(folder: Path, seconds: float = 10):
    """A read blocked on a FIFO under `folder` fails the case instead of hanging it: after
    `seconds`, each FIFO there is opened for writing (which lets a blocked open return) and
    the list yielded says so. (An alarm would not do: another thread may take the signal.)"""
    blocked: list[str] = []
    done = threading.Event()

    def watch():
        if done.wait(seconds):
            return
        for path in folder.rglob("*"):
            if stat.S_ISFIFO(path.lstat().st_mode):
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                    blocked.append(str(path))
                except OSError:  # no reader waiting on it
                    pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield blocked
    finally:
        done.set()
        watcher.join()


@contextmanager
def _file_size_limit(limit_bytes: str):
    import resource

    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit_bytes:
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit_bytes), old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)


def _snapshot(paths: list[Path]) -> dict[str, str]:
    return {str(p): (f"link:{os.readlink(p)}" if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in paths}


@pytest.mark.parametrize("case", list(CACHE_CASES))
def test_a_planted_cache_is_never_trusted(case, plant, expected, monkeypatch):
    CACHE_CASES[case](plant)
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(plant.cache))
    before = _snapshot(plant.kept)
    sums, n_events = expected
    with _unblocked(plant.tmp) as blocked, _file_size_limit(os.environ["TRACELAB_TEST_FSIZE"]):
        for _ in range(2):  # a miss (written), then a hit where the cache is usable
            if plant.parquet:
                assert len(tracelab.load(plant.trace).events) == n_events
            else:
                (got,) = tracelab.load_many([plant.trace], workers=1, reduce=_reduce(), keep_events=False)
                pd.testing.assert_frame_equal(got.summary["sums"], sums)
    assert not blocked, "a read blocked on a FIFO"
    assert not plant.marker.exists(), "a planted pickle ran"
    assert _snapshot(plant.kept) == before
    assert TRACE.exists()
    if plant.cache.is_dir() and not plant.cache.is_symlink():
        assert not [p for p in plant.cache.rglob(cachedir.TMP_PREFIX + "*")], "a temporary folder left"


def test_the_cache_is_used_and_private(plant, expected, monkeypatch):
    """The counterpart of the cases: a private cache is made 0700, written, marked, and hit."""
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(plant.cache))
    for _ in range(2):
        tracelab.load_many([plant.trace], workers=1, reduce=_reduce(), keep_events=False)
    assert stat.S_IMODE(plant.cache.stat().st_mode) == 0o700
    (entry,) = digest_cache.entries(Options.from_environment())
    assert (entry / cachedir.MARK).is_file() and stat.S_IMODE(entry.stat().st_mode) == 0o700
    seen = []
    monkeypatch.setattr(tracelab.ingest.loading, "_classified", lambda *a: seen.append(a))
    tracelab.load_many([plant.trace], workers=1, reduce=_reduce(), keep_events=False)
    assert seen == []  # a hit: no parse


def test_a_shared_folder_gets_a_private_subfolder(plant, monkeypatch):
    _shared(plant)
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(plant.cache))
    tracelab.load_many([plant.trace], workers=1, reduce=_reduce(), keep_events=False)
    sub = plant.cache / f"tracelab-{os.geteuid()}"
    assert [p.name for p in plant.cache.iterdir()] == [sub.name]
    assert stat.S_IMODE(sub.stat().st_mode) == 0o700 and len(digest_cache.entries(Options.from_environment())) == 1


def test_eviction_removes_own_entries_oldest_first(plant, monkeypatch):
    """Eviction still works on what tracelab wrote: two marked entries and a stale temporary
    folder of its own, a limit of one entry: the older entry and the temporary folder go."""
    monkeypatch.setenv("TRACELAB_CACHE_DIR", str(plant.cache))
    plant.cache.mkdir(mode=0o700)
    old = _own_entry(plant, "a" * 32, {"0.parquet": b"x" * 1000})
    new = _own_entry(plant, "b" * 32, {"0.parquet": b"x" * 1000})
    tmp = _own_entry(plant, cachedir.TMP_PREFIX + "killed", {"0.parquet": b"x"})
    for path, age_s in ((old, 7200), (new, 60), (tmp, 3600)):
        os.utime(path, (time.time() - age_s,) * 2)
    with cachedir.opened(Options.from_environment().cache_dir) as folder:
        removed = cachedir.evict(folder, 1500)
    assert sorted(removed) == sorted([old.name, tmp.name]) and new.exists()


# ---- outputs ----

def _run(t: Path) -> Path:
    return Path(shutil.copytree(m.DATA / "train-2gpu-torch", t / "run"))


def _prov_run(t: Path) -> Path:
    return Path(shutil.copytree(m.DATA / "decode-compile-prov-1gpu-torch", t / "run"))


def _trace(t: Path, name: str = "t.json.gz") -> Path:
    return Path(shutil.copy(TRACE, t / name))


def _export(t: Path, out: str, *more: str) -> list[str]:
    return ["export", "perfetto", str(_trace(t)), "-o", out, *more]


def _special(t: Path, kind: str) -> str:
    path = t / "out.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "link to /dev/null":
        path.symlink_to("/dev/null")
    elif kind == "device":  # a null device of the test's own: were it replaced, /dev/null would not be
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return str(path)


def _stale_tmp(t: Path, name: str, make=None) -> None:
    path = t / name
    (make or (lambda p: p.write_text("the user's")))(path)
    os.utime(path, (HOUR_AGO, HOUR_AGO), follow_symlinks=False)


def _ours(pid: int = DEAD_PID, uid: int | None = None) -> str:
    return f".tracelab-{os.geteuid() if uid is None else uid}-{pid}-abcd1234.tmp"


def _hard_linked(t: Path) -> list[str]:
    (t / "keep.txt").write_text("the user's")
    os.link(t / "keep.txt", t / _ours())
    os.utime(t / _ours(), (HOUR_AGO, HOUR_AGO))
    return _export(t, str(t / "m.json"))


def _input_named_ours(t: Path) -> list[str]:
    _stale_tmp(t, _ours(), lambda p: shutil.copy(TRACE, p))
    return ["export", "perfetto", str(t / _ours()), "-o", str(t / "m.json")]


# case -> (maker of the command line from tmp, the one line's fragment, or None: it succeeds and
# every file but the outputs is as it was)
OUT_CASES = {
    "report -o RUN/run.json --force": (lambda t: ["report", str(_run(t)), "-o", str(t / "run" / "run.json"),
                                                  "--force"], "run folder's record"),
    "report -o RUN/rank0.figures.json --force": (lambda t: ["report", str(_run(t)), "-o",
                                                            str(t / "run" / "rank0.figures.json"), "--force"],
                                                 "run folder's record"),
    "report -o RUN/rank0.provenance.json --force": (lambda t: ["report", str(_prov_run(t)), "-o",
                                                               str(t / "run" / "rank0.provenance.json"), "--force"],
                                                    "run folder's record"),
    "report -o RUN/rank0.results.json --force": (lambda t: ["report", str(_prov_run(t)), "-o",
                                                            str(t / "run" / "rank0.results.json"), "--force"],
                                                 "run folder's record"),
    "report of a rank's file -o its run.json --force": (
        lambda t: ["report", str(_run(t) / "rank0.pt.trace.json.gz"), "-o", str(t / "run" / "run.json"), "--force"],
        "run folder's record"),
    "export -o a memory snapshot beside the input --force": (
        lambda t: [(t / "snap.bin").write_bytes(pickle.dumps({"segments": []}, protocol=4)) and "export",
                   "perfetto", str(_trace(t)), "-o", str(t / "snap.bin"), "--force"], "memory snapshot"),
    "export -o another trace beside the input --force": (
        lambda t: _export(t, str(_trace(t, "rank1.json.gz")), "--force"), "a trace"),
    "export -o a FIFO --force": (lambda t: _export(t, _special(t, "fifo"), "--force"), "a FIFO"),
    "export -o a socket --force": (lambda t: _export(t, _special(t, "socket"), "--force"), "a socket"),
    "export -o a link to /dev/null --force": (lambda t: _export(t, _special(t, "link to /dev/null"), "--force"),
                                              "character device"),
    "export -o a FIFO (no --force)": (lambda t: _export(t, _special(t, "fifo")), "a FIFO"),
    "report -o a character device (a null device) --force": (
        lambda t: ["report", str(_trace(t)), "-o", _special(t, "device"), "--force"], "character device"),
    "export parquet -o a FIFO --force": (lambda t: ["export", "parquet", str(_trace(t)), "-o", _special(t, "fifo"),
                                                    "--force"], "a FIFO"),
    "export -o a 250-character name": (lambda t: _export(t, str(t / ("m" * 245 + ".json"))), None),
    "export -o a 255-character name": (lambda t: _export(t, str(t / ("m" * 250 + ".json"))), None),
    "export -o a 256-character name": (lambda t: _export(t, str(t / ("m" * 251 + ".json"))), "too long"),
    "export parquet -o a 250-character folder": (lambda t: ["export", "parquet", str(_trace(t)), "-o",
                                                            str(t / ("d" * 250))], None),
    "sweep: a user's .x.abcdefgh.tmp an hour old": (
        lambda t: (_stale_tmp(t, ".x.abcdefgh.tmp"), _export(t, str(t / "m.json")))[1], None),
    "sweep: a user's .tmp-x folder an hour old": (
        lambda t: (_stale_tmp(t, ".m.json.tmp-0123abcd", lambda p: (p.mkdir(), (p / "f").write_text("x"))),
                   _export(t, str(t / "m.json")))[1], None),
    "sweep: our name, another uid": (lambda t: (_stale_tmp(t, _ours(uid=1000)), _export(t, str(t / "m.json")))[1],
                                     None),
    "sweep: our name, a live process": (lambda t: (_stale_tmp(t, _ours(pid=os.getpid())),
                                                   _export(t, str(t / "m.json")))[1], None),
    "sweep: our name, a link to the user's file": (
        lambda t: ((t / "keep.txt").write_text("x"), _stale_tmp(t, _ours(), lambda p: p.symlink_to(t / "keep.txt")),
                   _export(t, str(t / "m.json")))[2], None),
    "sweep: our name, a hard link to the user's file": (_hard_linked, None),
    "sweep: our name, another user's file": (
        lambda t: (_stale_tmp(t, _ours(), lambda p: (p.write_text("x"), os.chown(p, NOBODY, NOBODY))),
                   _export(t, str(t / "m.json")))[1], None),
    "sweep: our name, a folder of the user's files": (
        lambda t: (_stale_tmp(t, _ours(), lambda p: (p.mkdir(), (p / "thesis.tex").write_text("x"))),
                   _export(t, str(t / "m.json")))[1], None),
    "sweep: our name, the command's own input": (_input_named_ours, None),
    "report -o RUN/report.html --force (a report: not read)": (
        lambda t: [(_run(t) / "report.html").write_text("old") and "report", str(t / "run"), "-o",
                   str(t / "run" / "report.html"), "--force"], None),
}
NEW_FILES = ("m", "d", ".tracelab-")  # outputs of the succeeding cases, and an unchanged tree besides


def _tree(folder: Path) -> dict[str, str]:
    """promise.tree that never opens a FIFO, socket or device (opening a FIFO blocks): those by kind."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[str(path.relative_to(folder))] = "link:" + os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif not stat.S_ISDIR(st.st_mode):
            out[str(path.relative_to(folder))] = f"special:{stat.S_IFMT(st.st_mode)}"
    return out


def _kept(folder: Path) -> dict[str, str]:
    """_tree less the outputs of the succeeding cases (the planted names of ours stay in)."""
    return {k: v for k, v in _tree(folder).items() if not k.startswith(NEW_FILES) or "abcd1234" in k}


@pytest.mark.parametrize("case", list(OUT_CASES))
def test_outputs_replace_only_what_tracelab_may(case, tmp_path, capsys, monkeypatch):
    one_process(monkeypatch)
    make, fragment = OUT_CASES[case]
    args = make(tmp_path)
    before = _tree(tmp_path) if fragment else _kept(tmp_path)
    out = Path(args[args.index("-o") + 1])
    with _unblocked(tmp_path) as blocked:
        status, _, err = m.run_cli_output(capsys, *args)
    assert not blocked
    if fragment is not None:  # the promise (tests/promise.py): one line, exit 2, nothing changed
        lines = err.splitlines()
        assert status == 2 and len(lines) == 1 and lines[0].startswith("tracelab: error: "), err[-2000:]
        assert fragment.lower() in lines[0].lower() and len(lines[0]) < 1000, lines[0]
        assert _tree(tmp_path) == before
        return
    assert status == 0, err
    assert out.exists() and (out.is_dir() or out.stat().st_size > 1000)
    after = _kept(tmp_path)
    if case.startswith("report -o RUN/report.html"):
        after.pop("run/report.html"), before.pop("run/report.html")
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tracelab-") and "abcd1234" not in p.name]


def test_the_sweep_removes_what_a_killed_tracelab_left(tmp_path, capsys, monkeypatch):
    """The counterpart: a temporary file and a staging folder of this user's tracelab, of a
    process that is gone, an hour old, are removed by the next write into their folder."""
    one_process(monkeypatch)
    _stale_tmp(tmp_path, _ours())
    _stale_tmp(tmp_path, _ours().replace("abcd1234", "0123abcd"), lambda p: (p / "rank=0").mkdir(parents=True))
    fresh = tmp_path / _ours().replace("abcd1234", "fresh123")
    fresh.write_text("another tracelab writing")
    status, _, err = m.run_cli_output(capsys, *_export(tmp_path, str(tmp_path / "m.json")))
    assert status == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.json", "t.json.gz", fresh.name])


@pytest.mark.parametrize("run", ["decode-1gpu-torch"] + [pytest.param(r, marks=pytest.mark.slow) for r in (
    "decode-2gpu-nsys", "train-2gpu-proton", "train-2cpu-memory-torch", "decode-compile-prov-1gpu-torch",
    "graph-1gpu-torch")])
def test_every_digest_unpickles_through_the_safe_unpickler(run, monkeypatch):
    """safe_pickle builds every digest of every topic (else each hit would be a miss, parsed again):
    the digests of a real run, pickled as digest_cache.put does, load back whole."""
    from tracelab.ingest import safe_pickle

    monkeypatch.setenv("TRACELAB_CACHE", "0")
    profiles = tracelab.load_many(m.DATA / run, workers=1, reduce=session.rank_digests(), keep_events=False)
    payload = pickle.dumps((profiles, [("a warning", UserWarning)], "x"), protocol=5)
    back, caught, _ = safe_pickle.loads(payload)
    assert caught == [("a warning", UserWarning)] and len(back) == len(profiles)
    for made, read in zip(profiles, back):
        assert [(k, type(v)) for k, v in read.summary.items()] == [(k, type(v)) for k, v in made.summary.items()]
        pd.testing.assert_frame_equal(read.summary["sums"], made.summary["sums"])
