"""Failures other than a bad value (issue 11): an error in a worker process, unreadable
files and folders, a full disk, a read-only folder, `ulimit -f`, escape sequences in names,
decompression bombs and huge names. Each ends in one line on stderr, exit status 2."""
from __future__ import annotations

import builtins
import importlib
import os
import pickle
import resource
import shutil
import subprocess
import struct
import sys
import warnings
import zlib
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

import malformed as m
from tracelab.core import errors
from tracelab.cli import terminal

load = importlib.import_module("tracelab.ingest.loading")  # the module: tracelab.load is also the function

TORCH_RUN = m.DATA / "allreduce-2gpu-torch"
ONE_RANK = m.DATA / "decode-1gpu-torch"  # the report's input


def _tracelab(*args: str, env: dict | None = None, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelab", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TRACELAB_CACHE": "0", **(env or {})},
                          preexec_fn=preexec)


def _one_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("tracelab: error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    return result.stderr


def _run_folder_with_truncated_rank(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(TORCH_RUN, run)
    good = (run / "rank1.pt.trace.json.gz").read_bytes()
    (run / "rank2.pt.trace.json.gz").write_bytes(good[: len(good) // 2])  # an interrupted write
    return run


@pytest.mark.slow
@pytest.mark.pool
def test_folder_with_one_truncated_gzip_beside_good_ones(tmp_path, capsys):
    """Parsed in worker processes: the worker's error reaches the parent as one line."""
    run = _run_folder_with_truncated_rank(tmp_path)
    status, lines = m.run_cli(capsys, "breakdown", str(run))  # in this process; the ranks in a pool
    assert status == 2 and len(lines) == 1 and lines[0].startswith("tracelab: error: "), lines
    assert str(run / "rank2.pt.trace.json.gz") in lines[0] and "truncated gzip" in lines[0]


@pytest.mark.slow
def test_no_blank_line_before_the_error(tmp_path, capsys):
    """An error after the progress bar (two files claiming rank 0) is the first and only line."""
    for name in ("a.pt.trace.json.gz", "b.pt.trace.json.gz"):
        shutil.copy(TORCH_RUN / "rank0.pt.trace.json.gz", tmp_path / name)
    status, _, err = m.run_cli_output(capsys, "breakdown", str(tmp_path))
    assert status == 2 and err.startswith("tracelab: error: ")
    assert err.count("\n") == 1 and "resolves to rank 0" in err, err


def test_load_many_raises_the_workers_own_error(tmp_path):
    run = _run_folder_with_truncated_rank(tmp_path)
    with pytest.raises(errors.TraceFormatError) as raised:
        load.load_many(run, workers=2)
    assert raised.value.where == str(run / "rank2.pt.trace.json.gz")
    assert "truncated gzip" in raised.value.reason


@pytest.mark.parametrize("cls", [c for c in vars(errors).values()
                                 if isinstance(c, type) and issubclass(c, errors.TracelabError)])
def test_every_error_survives_pickling(cls):
    error = pickle.loads(pickle.dumps(cls("/runs/x/rank3.json", "why")))
    assert (type(error), error.where, error.reason, str(error)) == (cls, "/runs/x/rank3.json", "why",
                                                                     "/runs/x/rank3.json: why")


def test_a_worker_that_died_is_named_by_its_file():
    future = Future()
    future.set_exception(BrokenProcessPool("a process terminated abruptly"))
    with pytest.raises(errors.TraceFormatError, match="process reading it died") as raised:
        load._result(future, Path("/runs/x/rank3.json"))
    assert raised.value.where == "/runs/x/rank3.json"


# ---- permissions (root reads everything: the denial is made by the test) -----------


def test_unreadable_trace_is_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "rank0.pt.trace.json.gz"
    shutil.copy(TORCH_RUN / "rank0.pt.trace.json.gz", path)
    real_open = builtins.open

    def denied(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    status, lines = m.run_cli(capsys, "breakdown", str(path))
    assert status == 2 and lines == [f"tracelab: error: {path}: cannot read: Permission denied"]


def test_unreadable_subfolder_is_an_error_not_skipped(tmp_path, capsys, monkeypatch):
    run = tmp_path / "runs"
    shutil.copytree(TORCH_RUN, run / "a")
    (run / "b").mkdir()
    real_scandir = os.scandir

    def denied(folder="."):
        if str(folder) == str(run / "b"):
            raise PermissionError(13, "Permission denied", str(folder))
        return real_scandir(folder)

    monkeypatch.setattr(os, "scandir", denied)
    with pytest.raises(errors.TraceFormatError, match="cannot read this folder: Permission denied") as raised:
        load.expand([run])
    assert raised.value.where == str(run / "b")


# ---- writing a report ------------------------------------------------------------------


def _file_size_limit(limit_bytes: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))


@pytest.mark.slow  # about 1 s of CPU here: the default run stays under 90 s
def test_report_past_ulimit_f_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "report.html"
    result = _tracelab("report", str(ONE_RANK), "-o", str(out), preexec=_file_size_limit(64 * 1024))
    _one_line(result, f"{out}: cannot write: File too large")
    assert list(tmp_path.iterdir()) == []  # no partial report, no temporary file


@pytest.fixture
def small_mount(tmp_path):
    """A 64 KiB tmpfs mounted at tmp_path/mnt (root only; skipped where mounting is refused)."""
    def mount(*options: str) -> Path:
        where = tmp_path / "mnt"
        where.mkdir(exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=64k", *options)), "tmpfs",
                               str(where)], capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(where)
        return where
    mounted: list[Path] = []
    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.parametrize("options, reason", [((), "No space left on device"), (("ro",), "Read-only file system")],
                         ids=["full disk", "read-only folder"])
@pytest.mark.slow
def test_report_on_a_full_or_read_only_disk_is_one_line(small_mount, options, reason):
    out = small_mount(*options) / "report.html"
    _one_line(_tracelab("report", str(ONE_RANK), "-o", str(out)), f"{out}: cannot write: {reason}")


@pytest.mark.slow
def test_report_gets_the_users_file_mode(tmp_path, capsys):
    out = tmp_path / "report.html"
    umask = os.umask(0o022)  # the user's usual mask, in this process (the CLI runs in it)
    try:
        status, lines = m.run_cli(capsys, "report", str(ONE_RANK), "-o", str(out))
    finally:
        os.umask(umask)
    assert status == 0, lines
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)


# ---- the terminal ------------------------------------------------------------------------


def test_file_name_with_escape_sequence_and_newline_stays_one_inert_line(tmp_path, capsys):
    path = tmp_path / "bad\x1b[2Jname\nx.json"
    path.write_text('{"traceEvents": [')
    status, lines = m.run_cli(capsys, "breakdown", str(path))
    assert status == 2 and len(lines) == 1
    assert "\x1b" not in lines[0] and "bad\\x1b[2Jname\\nx.json" in lines[0]


@pytest.mark.slow
def test_kernel_names_reach_the_table_escaped(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    hostile = "evil\x1b[2J\x1b]0;title\x07\u202ekernel"
    path = m.kineto_event("kernel", name=hostile)(tmp_path)
    status, out, _ = m.run_cli_output(capsys, "breakdown", str(path), "--by", "scope", "--top", "400")
    assert status == 0
    status, by_kernel, _ = m.run_cli_output(capsys, "breakdown", str(path), "--top", "400")
    assert status == 0
    shown = out + by_kernel
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "evil\\x1b[2J" in by_kernel


def test_warning_of_a_command_that_succeeds_is_one_escaped_line(capsys, monkeypatch):
    from tracelab.cli import program as cli

    def warns_then_succeeds(**_):  # cli.main calls app(standalone_mode=False, prog_name=...)
        warnings.warn("overflow in\x1b[2J cast\nsecond line", RuntimeWarning)
        raise SystemExit(0)

    monkeypatch.setattr(cli, "app", warns_then_succeeds)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with pytest.raises(SystemExit):
            cli.main()
    err = capsys.readouterr().err
    assert err.startswith("tracelab: warning: a library tracelab uses warned (RuntimeWarning at test_failures.py:")
    assert err.endswith("): overflow in\\x1b[2J cast\\nsecond line\n") and err.count("\n") == 1


@pytest.mark.parametrize("text, shown", [
    ("plain", "plain"), ("a\x1b[2Jb", "a\\x1b[2Jb"), ("two\nlines", "two\\nlines"), ("bell\x07", "bell\\x07"),
    ("c1\x9b", "c1\\x9b"), ("rtl\u202eevil", "rtl\\u202eevil"), ("byte\udcff", "byte\\udcff"), ("tab\t", "tab\\t"),
])
def test_printable(text, shown):
    assert terminal.printable(text) == shown


# ---- resources ---------------------------------------------------------------------------


def _zeros_gzip(path: Path, inflated_bytes: int, head: bytes = b'{"traceEvents": [') -> Path:
    """A gzip of `head` then spaces: valid-looking JSON that inflates to `inflated_bytes` (rounded
    down to MiB). One MiB of spaces is deflated once, after a full flush (no reference to what came
    before, byte-aligned), and its blocks repeated: one gzip member, as zlib would write it at
    level 9 but without compressing gigabytes of spaces (~30 s of CPU for 4 GiB)."""
    chunk = b" " * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate: the header is ours
    first = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = deflate.flush()  # the final (empty) block
    n = inflated_bytes // len(chunk)
    crc = zlib.crc32(head)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + first)  # gzip header: deflate, level 9, no name
        for _ in range(n):
            f.write(block)
            crc = zlib.crc32(chunk, crc)
        f.write(last + struct.pack("<II", crc, (len(head) + n * len(chunk)) & 0xFFFFFFFF))
    return path


def _peak_rss_mb_of_children() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def test_gzip_bomb_stops_at_the_limit(tmp_path, capsys, monkeypatch):
    bomb = _zeros_gzip(tmp_path / "bomb.json.gz", 16 * 1024**2)
    limit = 4 * 1024**2
    monkeypatch.setenv("TRACELAB_MAX_TRACE_BYTES", str(limit))
    status, lines = m.run_cli(capsys, "breakdown", str(bomb))
    assert status == 2 and lines == [f"tracelab: error: {bomb}: inflates to more than {limit:,} bytes, the limit "
                                     "(set TRACELAB_MAX_TRACE_BYTES to raise it)"]


@pytest.mark.slow
def test_4mb_gzip_that_inflates_to_4gib_is_one_line_in_bounded_memory(tmp_path):
    bomb = _zeros_gzip(tmp_path / "bomb.json.gz", 4 * 1024**3)
    assert bomb.stat().st_size < 8 * 1024**2
    _one_line(_tracelab("breakdown", str(bomb)), "inflates to more than 2,147,483,648 bytes")
    assert _peak_rss_mb_of_children() < 3 * 1024  # the default limit (2 GiB) plus the interpreter


@pytest.mark.slow
def test_name_over_the_limit_is_one_line_and_the_limit_can_be_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    monkeypatch.setenv("TRACELAB_MAX_NAME_CHARS", "100000")
    path = m.kineto_event("kernel", name="k" * 200_000)(tmp_path)
    status, lines = m.run_cli(capsys, "breakdown", str(path))
    assert status == 2 and len(lines) == 1
    assert "name: a name of 200,000 characters, over the limit of 100,000" in lines[0]
    monkeypatch.setenv("TRACELAB_MAX_NAME_CHARS", "300000")
    status, lines = m.run_cli(capsys, "breakdown", str(path), "--format", "csv")
    assert status == 0, lines


@pytest.mark.slow
def test_100mb_kernel_name_is_refused_quickly(tmp_path):
    path = m.kineto_event("kernel", name="k" * (100 * 1024**2))(tmp_path)
    _one_line(_tracelab("breakdown", str(path)), "name: a name of 104,857,600 characters")


@pytest.mark.skipif(load.pool_context().get_start_method() != "fork", reason="the patched parser must reach the workers")
def test_a_warning_in_a_worker_is_raised_in_the_caller(tmp_path, monkeypatch):
    """Not printed by the worker (as several lines, or lost): raised again in the caller's
    process, where the CLI prints it as one line, naming the file."""
    monkeypatch.setenv("TRACELAB_CACHE", "0")
    chrome = importlib.import_module("tracelab.parsers.chrome")
    read = chrome.read

    def warns(path, *args, **kwargs):
        warnings.warn("overflow encountered in cast", RuntimeWarning)
        return read(path, *args, **kwargs)

    monkeypatch.setattr(chrome, "read", warns)
    with pytest.warns(RuntimeWarning, match="overflow encountered in cast") as caught:
        profiles = load.load_many(TORCH_RUN, workers=2)
    assert [p.rank for p in profiles] == [0, 1]
    assert sorted(str(w.message) for w in caught) == [
        f"{TORCH_RUN / name}: overflow encountered in cast" for name in ("rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz")]


@pytest.mark.parametrize("value", ["lots", "inf", "-5", "nan"])
def test_a_bad_limit_in_the_environment_is_one_line(value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACELAB_MAX_TRACE_BYTES", value)
    status, lines = m.run_cli(capsys, "breakdown", str(TORCH_RUN / "rank0.pt.trace.json.gz"))
    assert status == 2 and lines == [f"tracelab: error: TRACELAB_MAX_TRACE_BYTES: {value!r} is not a number of 0 "
                                     "or more"]


def test_escaping_keeps_richs_own_line_breaks():
    """A title rich wraps over two lines stays two lines, not a literal backslash-n."""
    import io

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text("a title long enough to wrap at forty columns of width"), title_justify="left")
    table.add_column("kernel")
    table.add_row(Text("k\x1b[2J"))
    out = io.StringIO()
    Console(file=out, width=40).print(terminal.Escaped(table))
    assert "\\n" not in out.getvalue() and "k\\x1b[2J" in out.getvalue()
    words = [w for line in out.getvalue().splitlines()[:-5] for w in line.split()]  # the title's lines
    assert words == "a title long enough to wrap at forty columns of width".split()
