"""The command line starts light: `tracelab --help` and every `tracelab CMD --help` are built
from each topic's command module (its options and help), never its analysis, so none of them
imports pandas, numpy, plotly, pyarrow or scipy (each alone takes longer than the help itself)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "numpy", "plotly", "pyarrow", "scipy")

# which heavy modules `import tracelab.cli.program` imported; every command's --help in the same
# process, as `tracelab --help` lists them; which heavy modules all that imported, as the last line
EVERY_HELP = f"""
import contextlib, io, json, re, sys
from tracelab.cli.program import app
imported = sorted(m for m in {HEAVY!r} if m in sys.modules)

def help_of(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = app([*argv, "--help"], standalone_mode=False, prog_name="tracelab")
    return status, out.getvalue()

def listed(text):
    return re.findall(r"^\\W (\\w+) ", text, re.M)  # the Commands box: '| name  help'

helps, todo = {{}}, [[]]
while todo:
    argv = todo.pop(0)
    status, text = help_of(argv)
    helps[" ".join(argv)] = (status, " ".join(["Usage: tracelab", *argv, "[OPTIONS]"]) in text)
    todo += [[*argv, name] for name in listed(text)]
print(json.dumps({{"imported": imported, "helps": helps, "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules)}}))
"""


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_the_program_and_every_help_import_no_analysis():
    from tracelab.reports.topics import TOPICS

    got = json.loads(_python(EVERY_HELP).splitlines()[-1])
    assert got["imported"] == [] and got["heavy"] == []  # after `import tracelab.cli.program`; after every help
    commands = {t.name for t in TOPICS if t.command} | {"report", "gate", "run", "export", "export perfetto"}
    assert commands <= set(got["helps"])
    assert all(status in (0, None) and own_usage for status, own_usage in got["helps"].values())
