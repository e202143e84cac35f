"""Notes are codes with values; their words come from one catalogue (tracelab/core/note.py)."""
from __future__ import annotations

import json
from string import Formatter

import pytest

from tracelab.core.note import TEMPLATES, Note


def test_a_note_reads_as_its_template_over_its_values_under_where_and_rank():
    note = Note("ranks_on_one_clock", {"clock": "epoch"}).about(rank=3).about("runs/a")
    assert note.text == "runs/a: rank 3: ranks on one clock: epoch" == str(note)
    assert note.as_json() == {"code": "ranks_on_one_clock", "values": {"clock": "epoch"},
                              "text": "runs/a: rank 3: ranks on one clock: epoch", "where": ["runs/a"], "rank": 3}
    assert note.about(rank=5).rank == 3  # a note keeps the rank it was made for


@pytest.mark.parametrize("steps, words", [([4], "step 4: "), ([1, 2, 3], "steps 1, 2, 3 (3 of 20): "),
                                          (list(range(10)), "steps 0, 1, 2, 3, 4, 5, 6, 7 and 2 more (10 of 20): ")])
def test_plurals_and_lists_of_steps(steps, words):
    text = Note("edge_missing", {"steps": steps, "steps_total": 20, "unexplained_ns": 1_500_000, "cpu_only": False,
                                 "path_known": True}).text
    assert text.startswith(words) and "(1.500 ms" in text and text.endswith(f"for {'it' if len(steps) == 1 else 'them'}")


def test_an_unknown_code_fails_where_the_note_is_made_and_every_template_names_only_its_values():
    with pytest.raises(KeyError, match="no template"):
        Note("no_such_code")
    for code, template in TEMPLATES.items():
        if isinstance(template, str):  # a str.format template: its fields are the values' keys
            fields = {name for _, name, _, _ in Formatter().parse(template) if name}
            assert Note(code, {k: 1 for k in fields}).text, code
    assert json.loads(json.dumps(Note("more_cycles", {"cycles": 2}).as_json()))["text"].startswith("... and 2 more")
