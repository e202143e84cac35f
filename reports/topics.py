"""Every question tracelab answers, registered in one place: a `Topic` names its per-rank digests
(made in the worker that parses each rank, read through reports/session.Input.digest), its
findings sources, its report section and its command. reports/ranks.py, reports/findings/findings.py
and reports/html/html.py iterate TOPICS, and tracelab/cli/program.py registers each topic's command;
nothing else names a topic's modules to hook it in.

Each part is named "module:NAME" under tracelab.reports and imported when used, so this registry
imports nothing of a topic: `tracelab --help` reads it without pandas, it sits below the renderers
that read it (no import cycle), and the workers never import plotly.

    digests:  a dict name -> fn(rank: RankData), picklable for the workers
    findings: fn(ev: findings.Evidence) -> list[Finding]
    section:  fn(inputs, figure, table, comparison, runs) -> list[str]  (HTML fragments, in TOPICS order;
              runs: the report's (run folder name, run.json))
    command:  a tracelab.cli.commands.topic.Command: `tracelab <name>`'s options, analysis and renderers
              (the CLI imports it when it runs, never a worker; its module imports the analysis only
              when the command runs)
    result:   fn(input) -> the topic's result for one input, which others read by result_of(name, input)
    step_columns: fn(step rows, ranks, the run's step without the profiler as measured or None) ->
              `tracelab steps`' rows with the topic's columns beside them
    min_runs: the runs its digests need (the gate's section judges a later run against the first: 2);
              where every digest is asked for (the report), inputs of fewer runs go without them
    savings:  fn(ev, [(source name, findings)]) -> every finding with its saving (with_savings)

Topics never import one another (tests/test_layers.py): what one reads of another goes through
these names or the other's digests by name. The registry imports no topic either: each is named
by "module:NAME", imported when used, so that `tracelab --help` imports no analysis.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Topic:
    name: str
    digests: str | None = None  # "module:NAME" under tracelab.reports of a dict name -> fn(rank: RankData)
    findings: tuple[str, ...] = ()  # "module:function" under tracelab.reports, in order
    section: str | None = None  # "module:function" under tracelab.reports
    command: str | None = None  # "module:NAME" under tracelab.reports
    result: str | None = None  # "module:function" under tracelab.reports: fn(input) -> its result for one input
    savings: str | None = None  # "module:function": fn(ev, [(source name, findings)]) -> findings, each with its saving
    step_columns: str | None = None  # "module:function": fn(step rows, ranks, unprofiled ns) -> the rows, its columns beside
    min_runs: int = 1  # where all digests are asked for, its own are made only of inputs holding this many runs

    def digest_fns(self) -> dict[str, Callable[[Any], Any]]:
        return resolve(self.digests) if self.digests else {}

    def findings_sources(self) -> list[Callable]:
        return [resolve(ref) for ref in self.findings]

    def section_renderer(self) -> Callable | None:
        return resolve(self.section) if self.section else None

    def command_spec(self):
        return resolve(self.command) if self.command else None


def named(name: str) -> Topic:
    (found,) = [t for t in TOPICS if t.name == name]
    return found


def result_of(name: str, i) -> Any:
    """Topic `name`'s result for one input (ranks.Input), made once per input by the topic's own
    function: how a shared layer or another topic reads a topic's results without importing it."""
    return resolve(named(name).result)(i)


def with_savings(ev, found: list[tuple[str, list]]) -> list:
    """The findings of each source (name, findings), each with its what-if saving: the one topic
    that weighs them (the whatif topic's critical-path replay) does."""
    (weigh,) = [resolve(t.savings) for t in TOPICS if t.savings]
    return weigh(ev, found)


def step_columns(name: str, rows, ranks: list, unprofiled_step_ns: float | None = None) -> Any:
    """`tracelab steps`' step rows (one per step and rank) with topic `name`'s columns beside them,
    from the ranks' (schema.Profile) digests of that topic and the run's step without the profiler
    (`unprofiled_step_ns`, as measured: unprofiled.measured_step; None where not)."""
    return resolve(named(name).step_columns)(rows, ranks, unprofiled_step_ns)


def resolve(ref: str) -> Any:
    """The object a "module:NAME" under tracelab.reports names, its module imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(f"tracelab.reports.{module}"), name)


TOPICS: tuple[Topic, ...] = (
    Topic("breakdown", findings=("findings.findings_copy:copy_findings",), command="breakdown.command:COMMAND"),
    Topic("compare", "align.digests:DIGESTS", command="compare.command:COMMAND"),
    Topic("steps", "steps.digests:DIGESTS",
          findings=("findings.findings:straggler_findings", "findings.findings:exposed_findings",
                    "findings.findings_more:cpu_comm_findings"),
          section="steps.steps_html:section", command="steps.command:COMMAND"),
    Topic("roofline", "roofline.roofline:DIGESTS", findings=("findings.findings_more:roofline_findings",),
          section="roofline.roofline_html:sections", command="roofline.command:COMMAND"),
    Topic("idle", "idle.idle:DIGESTS", findings=("findings.findings:idle_or_share",),
          section="idle.idle_html:sections", command="idle.command:COMMAND", result="idle.idle:of_input",
          step_columns="idle.idle:step_columns"),
    Topic("runs", findings=("runs.findings_runs:difference_findings",
                            "runs.findings_runs:profiler_cost_findings", "runs.findings_busy:busy_bound_findings")),
    # each rank's graph and its steps' bounds (idle and steps read them); findings.findings ranks every
    # finding by its saving
    Topic("whatif", "whatif.bound:DIGESTS", section="whatif.whatif_html:sections", command="whatif.command:COMMAND",
          savings="whatif.findings:with_savings"),
    Topic("fixes", "fixes.digests:DIGESTS",  # what names the fix
          findings=("fixes.gemm:tf32_findings", "fixes.gemm:alignment_findings", "fixes.host:graphs_findings",
                    "fixes.ddp:ddp_findings", "fixes.loader:loader_findings", "fixes.stall:stall_findings")),
    Topic("memory", "memory.memory:DIGESTS", findings=("memory.findings:memory_findings",),
          section="memory.memory_html:sections", command="memory.command:COMMAND"),
    # each later run against the first, in the report (its command, `tracelab gate`, takes sides: cli/commands/gate.py)
    Topic("gate", "gate.samples:DIGESTS", section="gate.gate_html:sections", min_runs=2),
)

# the order `tracelab --help` lists the topics' commands in (TOPICS' order is the report's); a topic
# not named here is listed after these
LISTED = ("breakdown", "roofline", "compare", "steps", "idle", "whatif", "memory")
