"""Usage errors are one line on stderr, naming the command's --help (issue 29: click's own drew a
box), with click's exit status 2; `tracelab --help` lists each command in one flowing sentence."""
from __future__ import annotations

import sys

import pytest

from tracelab import cli


def _main(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["tracelab", *argv])
    with pytest.raises(SystemExit) as done:
        cli.main()
    out, err = capsys.readouterr()
    return done.value.code, out, err


@pytest.mark.parametrize("argv, says", [
    (("breakdown", "--nope", "x"), "tracelab: error: No such option: --nope (Possible options: --top); "
                                    "see tracelab breakdown --help"),
    (("nosuch",), "tracelab: error: No such command 'nosuch'; see tracelab --help"),
    (("steps", "--top", "x"), "see tracelab steps --help"),
    (("export", "perfetto"), "see tracelab export perfetto --help"),
])
def test_a_usage_error_is_one_line_with_status_2(monkeypatch, capsys, argv, says):
    code, out, err = _main(monkeypatch, capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tracelab: error: ") and says in err
    assert "╭" not in err and "Traceback" not in err


def test_no_arguments_prints_the_help_with_status_2(monkeypatch, capsys):
    code, out, err = _main(monkeypatch, capsys)
    assert code == 2 and "Usage: tracelab" in out + err and "breakdown" in out + err


def test_help_lists_each_command_in_one_sentence(monkeypatch, capsys):
    code, out, _ = _main(monkeypatch, capsys, "--help")
    assert code == 0
    listed = {line.split("│")[1].split()[0]: line for line in out.splitlines()
              if line.startswith("│ ") and line.split("│")[1].strip()[:1].isalpha()
              and not line.split("│")[1].startswith("  ")}
    assert {"breakdown", "roofline", "compare", "steps", "idle", "whatif", "memory", "report", "run",
            "export", "factors"} <= set(listed)
    assert "Why was the GPU idle?" in listed["idle"] and "What should I fix first" in listed["whatif"]


def test_a_good_command_still_exits_0(monkeypatch, capsys, tmp_path):
    code, out, err = _main(monkeypatch, capsys, "breakdown", "--help")
    assert code == 0 and "Usage: tracelab breakdown" in out
