"""Notes: what an analysis, a parser or a command could not take at face value, as a code with
its numbers, never as a sentence a program must parse.

A `Note` is `code` (stable for JSON users: "no_steps", "scenario_unmatched", ...), `values` (its
numbers and names, units in the keys: `unexplained_ns`, `error_frac`; plain Python values, so
JSON-able), and what it is about: `where` (a run, an input's label or path, outermost first)
and `rank`. Its words are made only here, from TEMPLATES (code -> template), so that every
renderer says a note the same way and a new wording is one line:

    Note("scenario_unmatched", {"scenario": "no-host-gaps"}).about(rank=0).text
    -> "rank 0: scenario no-host-gaps: nothing in these inputs matches it (...): it changes nothing"

To add a note: one entry in TEMPLATES (a `str.format` template over its values, or a function of
them for plurals and choices), then `Note(code, values)` where the analysis found it; renderers
print `note.text`; `--format json` writes `note.as_json()` (code, values and the text). A code
not in TEMPLATES fails at construction, so a typo is a test failure, not a blank line.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable


def _steps_named(steps: list, of: int) -> str:
    """'step 12', 'steps 12, 13 and 15 (3 of 20)'; past 8 steps, the first 8 and how many more."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    shown = ", ".join(map(str, steps[:8])) + (f" and {len(steps) - 8} more" if len(steps) > 8 else "")
    return f"steps {shown} ({len(steps)} of {of})"


def _them(steps: list) -> str:
    return "it" if len(steps) == 1 else "them"


def _replay_misses(v: dict) -> str:
    return (f"{_steps_named(v['steps'], v['steps_total'])}: the unchanged replay misses the measured step by more "
            f"than {100 * v['max_error_frac']:.0f}% (up to {100 * v['error_frac']:.0f}%): no saving is claimed "
            f"for {_them(v['steps'])}")


def _edge_missing(v: dict) -> str:
    what = ("operator and collective starts that no caller, thread order or other thread explains" if v["cpu_only"]
            else "GPU starts that no launch, stream order or other stream explains")
    one = len(v["steps"]) == 1
    unknown = "" if v["path_known"] else (
        f"; what {'its critical path is' if one else 'their critical paths are'} made of is not known either "
        "(shown as ?, null in JSON)")
    return (f"{_steps_named(v['steps'], v['steps_total'])}: an edge is missing "
            f"({v['unexplained_ns'] / 1e6:,.3f} ms{'' if one else ' in all'} of {what}): no saving is "
            f"claimed for {_them(v['steps'])}{unknown}")


def _no_steps(v: dict) -> str:
    why = "its step ranges hold no GPU work's launch" if v["step_ranges"] else "no range matches the step pattern"
    return (f"no steps in this trace ({why}; see --step): the whole trace, first GPU start to last GPU end, "
            "is one window (step null)")


# code -> its words: a str.format template over the note's values, or a function of them
TEMPLATES: dict[str, str | Callable[[dict], str]] = {
    # idle
    "idle_untimed": "no idle breakdown: proton records no launches and no timestamps",
    "idle_no_gpu_activity": "no idle breakdown: no GPU kernel, memcpy or memset with timestamps",
    "no_steps": _no_steps,
    "idle_no_launches": ("no launch calls in this trace (none matched by correlation id): "
                         "its idle is all idle_other_ns"),
    "no_host_intervals": ("no host intervals in this input (a tracelab dataset, or events without their "
                          "Profile.host): sync idle counts as host, and no CPU ops are named"),
    "host_bound_hint": ("hint: host-bound steps: the GPU waited for the host to launch work. CUDA graphs "
                        "(torch.cuda.graphs), torch.compile(mode=\"reduce-overhead\") or a larger batch per step "
                        "may help; this is a suggestion, not a measurement"),
    # whatif
    "nothing_to_replay": "no timed activity: nothing to replay",
    "scenario_unmatched": ("scenario {scenario}: nothing in these inputs matches it (names, kernels, scopes, host "
                           "ranges): it changes nothing"),
    "cpu_only_path": ("no GPU kernel, memcpy or memset in these traces: the path runs over the host's operators "
                      "(compute is CPU operators' time, comm their collectives')"),
    "ranks_on_one_clock": "ranks on one clock: {clock}",
    "replay_misses_steps": _replay_misses,
    "edge_missing": _edge_missing,
    "one_rank_collectives": ("one rank: its collectives' waits cannot be told from their transfers by a peer; "
                             "wait is each one's time beyond its fastest instance of the same name and size"),
    "dependency_cycle": ("the trace's times contradict its dependencies (a cycle: {cycle}): the {edge_kind} edge "
                         "into {node} is dropped"),
    "more_cycles": "... and {cycles} more such cycles, each broken the same way",
    "launches_unknown": "no launch calls in this trace: each GPU op is pinned at its measured start",
    "no_timeline": "proton records no timeline (no start times, no launches): no critical path or replay",
    "collective_ends_early": ("{collectives} collective ends came before their last rank's arrival on the common "
                              "clock: their transfer is taken as 0"),
}


@dataclass(frozen=True)
class Note:
    """One thing the data could not say, as `code` and `values` (module docstring), about
    `where` (outermost first) and `rank`; `text` is its sentence, made from TEMPLATES."""
    code: str
    values: dict[str, Any] = field(default_factory=dict)
    where: tuple[str, ...] = ()
    rank: int | None = None

    def __post_init__(self) -> None:
        if self.code not in TEMPLATES:
            raise KeyError(f"note code {self.code!r} has no template in tracelab/core/note.py")

    def about(self, where: str | None = None, rank: int | None = None) -> Note:
        """This note under `where` (put before any it has) and of `rank` (where it has none)."""
        return replace(self, where=(where, *self.where) if where is not None else self.where,
                       rank=self.rank if self.rank is not None else rank)

    @property
    def text(self) -> str:
        """'<where>: rank <rank>: <the template over the values>'."""
        template = TEMPLATES[self.code]
        body = template(self.values) if callable(template) else template.format(**self.values)
        rank = () if self.rank is None else (f"rank {self.rank}",)
        return ": ".join((*self.where, *rank, body))

    def __str__(self) -> str:
        return self.text

    def as_json(self) -> dict[str, Any]:
        """code, values and text; where and rank where it has them."""
        out: dict[str, Any] = {"code": self.code, "values": self.values, "text": self.text}
        if self.where:
            out["where"] = list(self.where)
        if self.rank is not None:
            out["rank"] = self.rank
        return out


def texts(notes: list[Note]) -> list[str]:
    """The notes' sentences, in order."""
    return [n.text for n in notes]
