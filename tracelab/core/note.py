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


def _phases_not_paced(v: dict) -> str:
    how = ("the run timed its step without the profiler but not each phase of it on every rank: predictions "
           "without the profiler scale the whole step alike" if v["step_measured"] else
           "no step without the profiler measured beside these traces: predictions without the profiler take the "
           "profiler's fitted cost per event off, every operator alike")
    return (f"{how}, though the profiler slows a phase of many small operators more than one of a few large ones "
            "(a run of `tracelab run train` times each phase without it, and each phase's operators then take "
            "their own pace)")


def _autocast_model(v: dict) -> str:
    scaled = ("each matrix product scaled by its own shape's factor" if v.get("per_shape")
              else "the matrix products scaled by F")
    left = ["inputs already in bf16", "cached weight casts", "elementwise ops and attention on half the bytes"]
    if not v.get("dispatch"):
        left.append("autocast's dispatch on every op")
    measure = ("" if v.get("per_shape") else "; one factor for every product misses a step whose products' speed-up "
               "differs by shape: measure each at its own shapes on the machine that runs the change with "
               "`tracelab factors RUN --out f.json`, then `--scenario autocast:bf16=@f.json`")
    return (f"autocast:bf16 is a model: {scaled}, and {v['casts']} casts per forward product (and as many back in "
            "a training step) at this trace's median host time per issued op and device time per op; "
            f"{', '.join(left[:-1])} and {left[-1]} are not modelled{measure}")


def _compile_model(v: dict) -> str:
    what = "CPU operators (Inductor's C++ kernels)" if v["cpu_only"] else "kernels"
    graphs = "; the host off the path, as cuda-graph" if v["reduce_overhead"] else ""
    return (f"compile is a model: {v['fused_ops']:,} pointwise, reduction and copy {what} between extern ops "
            f"(matrix products, attention, collectives, copies; the optimizer and the loss stay eager) in {v['groups']:,} runs become "
            f"{v['kernels']:,} fused ones (one per reduction), each of its largest member's time and one launch: "
            f"{v['eager_ns'] / 1e6:,.3f} ms of them in the trace -> {v['modelled_ns'] / 1e6:,.3f} ms (a lower bound; "
            f"at most the trace's){graphs}; autotuning, recompiles, graph breaks, Inductor's own matmul templates, "
            "layout changes and the Python around extern ops are not modelled")


def _autocast_factors(v: dict) -> str:
    dispatch = (f"autocast's dispatch adds {v['dispatch_ns_per_op']:,.0f} ns to each CPU operator the profiler "
                f"recorded (measured on {v['dispatch_machine']})" if v["dispatch_ns_per_op"] is not None
                else f"autocast's dispatch on every op is left out (none measured on a {v['device']} host)")
    return (f"autocast:bf16 factors from {v['file']}: timed at the trace's shapes, fp32 against bf16, on "
            f"{v['machine']} ({v['device']}, {v['measured_at']}); {v['listed']} of {v['products']} products found "
            f"there by name and place in their step, the rest at {v['default']:.3g}; {dispatch}")


def _peaks_before_start(v: dict) -> str:
    return (f"{v['peaks']} of {v['steps']} peaks fall before the trace's start (as early as "
            f"{v['peak_at_ns_min'] / 1e6:,.1f} ms): memory allocated before the capture began; their 'peak at' "
            "times are negative")


def _one_side_only(v: dict) -> str:
    return f"measured on one side only, not judged: {', '.join(v['metrics'])}"


def _graph_captures(v: dict) -> str:
    return (f"{v['captures']} CUDA-graph capture{'s' if v['captures'] > 1 else ''} in this trace "
            f"({v['launch_calls']:,} launch calls inside, which ran nothing then): its idle, launch and host figures "
            "include capturing, not only the steps that replay the graphs")


def _strangers_on_comm_stream(v: dict) -> str:
    n = v["kernels"]
    names = ", ".join(v["names"]) + (", ..." if n > len(v["names"]) else "")
    return (f"{n} kernel{'s' if n > 1 else ''} ({names}; {v['rows']:,} run{'s' if v['rows'] > 1 else ''}, "
            f"{v['dur_ns'] / 1e6:,.3f} ms) run on device {v['device']} stream {v['stream']} with only communication "
            f"kernels beside {'them' if n > 1 else 'it'}: counted as compute (op class other); "
            f"{'they' if n > 1 else 'it'} may be communication")


def _comm_by_launch(v: dict) -> str:
    n = v["kernels"]
    names = ", ".join(v["names"]) + (", ..." if n > len(v["names"]) else "")
    why = "; ".join(v["contexts"])
    return (f"{n} kernel{'s' if n > 1 else ''} ({names}; {v['rows']:,} run{'s' if v['rows'] > 1 else ''}, "
            f"{v['dur_ns'] / 1e6:,.3f} ms) counted as communication by {'their' if n > 1 else 'its'} launch, "
            f"not {'their' if n > 1 else 'its'} name: {why}")


# a table an nsys export may lack (parsers/_nsys_meta.schema_gaps) -> what is not known without it
NSYS_TABLES_MISSING = {
    "TARGET_INFO_GPU": "no GPU table (TARGET_INFO_GPU; TARGET_INFO_CUDA_GPU before nsys 2021.2): its GPUs are not "
                       "named, so no roofline and no device advice",
    "META_DATA_EXPORT": "no version table (META_DATA_EXPORT; EXPORT_META_DATA before nsys 2023): the nsys version "
                        "that wrote it is unknown",
}


def _nsys_tables_missing(v: dict) -> str:
    return "; ".join(NSYS_TABLES_MISSING[t] for t in v["tables"])


# a Kineto category of device activity tracelab reads no GPU rows from -> what its events are, and why
UNREAD = {
    "cuda_profiler_range": "kernels measured by CUPTI's range profiler (hardware counters), which serialises "
                           "the kernels and may replay each one, so their lengths are not the kernels' run times; "
                           "tracelab reads no GPU time from them",
    "mtia_ccp_events": "an MTIA accelerator's device activity, which tracelab does not read (it reads CUDA "
                       "and ROCm GPU activity)",
    "hpu_op": "a Gaudi (HPU) device's activity, which tracelab does not read (it reads CUDA and ROCm GPU activity)",
}


def _unread(v: dict) -> str:
    n = v["events"]
    return f"{n:,} {v['category']} event{'s' if n > 1 else ''} and no kernel, memcpy or memset: {UNREAD[v['category']]}"


def _gate_level(v: dict) -> str:
    return (f"each of {v['metrics']} metrics judged at {v['level']:.2%} (Bonferroni: the gate's false alarms at "
            f"most {1 - v['gate_level']:.0%}); detectable: the smallest change told from noise at that level")


def _gate_repeats(v: dict) -> str:
    runs = f"{v['baseline_runs']} baseline, {v['candidate_runs']} candidate runs"
    measured = ("" if v.get("step_spread") is None else
                f": the step time's runs differ by {v['step_spread']:.1%} (sd) within a side, the floor "
                f"{v['step_floor']:.1%}")
    return (f"noise between runs: the larger of the spread measured on the repeats ({runs}) and the floor "
            f"(one run's steps and --run-noise {v['run_noise']:.0%}: runs made at other times differ more "
            f"than repeats of one time show){measured}; ")


def _gate_history(v: dict) -> str:
    measured = ("" if v.get("step_history") is None else
                f": the step time's versions differ by {v['step_history']:.1%} (sd), the floor {v['step_floor']:.1%}")
    return (f"noise between runs: the largest of the spread between the {v['versions']} baselines the store kept "
            f"(this one the latest; runs made at other times, Student's t), the repeats' where a side has several, "
            f"and the floor (one run's steps and --run-noise {v['run_noise']:.0%}){measured}; ")


def _gate_unmeasured(v: dict) -> str:
    kept, needed = v.get("versions", 1), v.get("min_versions", 3)
    history = (f"the store kept {kept} baselines of it, {needed - kept} short of the {needed} that measure it"
               if kept > 1
               else "a store keeps the baselines accepted before it (tracelab gate --accept keeps the last 5)")
    return (f"one run a side: the noise between runs is unmeasured, two runs of the job taken to differ by "
            f"{v['run_noise']:.0%} (sd) in time beyond their steps' own spread (--run-noise); measure it with "
            f"repeats (tracelab run --repeat 3) or with history ({history}); ")


def _gate_unreliable(v: dict) -> str:
    from tracelab.reports.fmt import binary_size  # here: reports import this module

    runs = f"{v['runs']} run{'s' if v['runs'] > 1 else ''}"
    return (f"{v['metric']} unreliable, not failed on: the trace's allocated total at a step's start climbed by up "
            f"to {binary_size(v['climb_bytes'])} over the steps ({v['run']}; {runs}): blocks allocated and never "
            "freed in the trace (frees the profiler missed, or a leak) move its peak by whole blocks; "
            "peak_above_start judges the step's own memory")


def _gate_sources(v: dict) -> str:
    parts = [f"{source} ({len(names)}: {', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"
             for source, names in v["sources"].items()]
    return "what set each metric's noise: " + "; ".join(parts)


def _no_steps(v: dict) -> str:
    why = "its step ranges hold no GPU work's launch" if v["step_ranges"] else "no range matches the step pattern"
    return (f"no steps in this trace ({why}; see --step): the whole trace, first GPU start to last GPU end, "
            "is one window (step null)")


# code -> its words: a str.format template over the note's values, or a function of them
TEMPLATES: dict[str, str | Callable[[dict], str]] = {
    # parsers and loading: what a reader could not take at face value (Meta.notes)
    "text": "{text}",  # a note as older tracelab wrote it (a dataset part, a cache entry): its words alone
    "graph_captures": _graph_captures,
    "replays_captured_outside": ("{outside} of {replays} CUDA-graph replays ({gpu_rows} GPU rows) were captured "
                                 "outside the trace: their rows keep the replay's scope"),
    "replays_on_streams": ("{replays} CUDA-graph replays ran on several streams: their rows are matched to the "
                           "capture's launches in start order, which may swap concurrent branches"),
    "graph_nodes_captured_outside": ("{outside_rows} of {node_rows} CUDA-graph node rows were captured outside the "
                                     "trace (before its first CUDA call): they keep the replay's scope"),
    "whole_graphs": ("{launches} CUDA graph launches were traced as whole graphs (nsys's default, "
                     "--cuda-graph-trace=graph): each is one GPU op over its graph's span, its kernels not in the file; "
                     "profile with --cuda-graph-trace=node to see them"),
    "unread_device_events": _unread,
    "nsys_tables_missing": _nsys_tables_missing,
    "step_numbers_repeat": ("step ranges repeat their numbers ({occurrences} later occurrences, e.g. a second "
                            "{range_name!r}, step {step}): each occurrence is a step of its own, the k-th occurrence "
                            "of N numbered N + k * {scale}"),
    "memory_summed": ("its [memory] events give no totals (PyTorch 1.8/1.9): allocated is the running sum of their "
                      "bytes from the trace's start, so what was allocated before it (weights, optimizer state) is "
                      "not counted, and without addresses no block is followed from its allocation to its free"),
    "frees_before_trace": ("{table}: frees of {freed_bytes:,} bytes whose allocations the file does not hold; the "
                           "memory held starts at that much"),
    "snapshot_untimed": ("the snapshot's actions have no timestamps (an older PyTorch): they are in order, not in "
                         "time, so no time is shown for them (-, null in JSON)"),
    "comm_stream_strangers": _strangers_on_comm_stream,
    "comm_by_launch": _comm_by_launch,
    "snapshot_without_traces": ("the snapshot has no device_traces: record them with "
                                "torch.cuda.memory._record_memory_history()"),
    "modules_may_shift": ("{kernel} ran {runs} times, not a multiple of its {calls_per_graph} calls per compiled "
                          "graph: its modules, given in call order, may be shifted"),
    "rank_assumed": "neither the file nor its name gives its rank: shown as rank 0",
    "snapshot_rank_assumed": ("a memory snapshot with no rank (neither the file nor its name gives one): its rows are "
                              "this snapshot's own, their rank 0 a placeholder; name it rank<N>.pickle to place it "
                              "among a job's ranks"),
    # commands: an input a command does not read
    "snapshot_not_read": "a memory snapshot, which `tracelab {command}` does not read (tracelab memory does)",
    "snapshot_not_gated": "a memory snapshot, which `tracelab gate` does not read (give the run's trace)",
    "not_one_job": "{reason}: steps takes the ranks of one run (compare takes several runs)",
    # idle
    "idle_untimed": "no idle breakdown: proton records no launches and no timestamps",
    "idle_no_gpu_activity": "no idle breakdown: no GPU kernel, memcpy or memset with timestamps",
    "no_steps": _no_steps,
    "idle_no_launches": ("no launch calls in this trace (none matched by correlation id): "
                         "its idle is all idle_other_ns"),
    "no_host_intervals": ("no host intervals in this input (a tracelab dataset, or events without their "
                          "Profile.host): sync idle counts as host, and no CPU ops are named"),
    "host_bound_profiled": ("host-bound under the profiler only ({steps} of {host_steps} host-bound steps): without it "
                            "(a step of {unprofiled_ms} ms, measured) the host's gaps are at most {user_pct}% of the step "
                            "against {profiled_pct}% under it: the device paces the step the user runs"),
    "host_bound_hint": ("hint: host-bound steps: the GPU waited for the host to launch work. CUDA graphs "
                        "(torch.cuda.graphs), torch.compile(mode=\"reduce-overhead\") or a larger batch per step "
                        "may help; this is a suggestion, not a measurement"),
    # whatif
    "nothing_to_replay": "no timed activity: nothing to replay",
    "scenario_unmatched": lambda v: (f"scenario {v['scenario']}: nothing in these inputs matches it "
                                     f"({v.get('what', 'names, kernels, scopes, host ranges')}): it changes nothing"),
    "overlap_dependent": ("overlap-comm: {dependent} of the {collectives} collectives sit between the compute that "
                          "makes their input and the compute that reads their result, layer after layer (tensor "
                          "parallelism): they stay where they are; {fused}"),
    "autocast_model": _autocast_model,
    "autocast_factors": _autocast_factors,
    "compile_model": _compile_model,
    "cpu_only_path": ("no GPU kernel, memcpy or memset in these traces: the path runs over the host's operators "
                      "(compute is CPU operators' time, comm their collectives')"),
    "phases_not_paced": _phases_not_paced,
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
    # memory
    "proton_no_memory": "proton records no memory events",
    "no_memory_events": ("no memory events in the trace: record them with torch.profiler(profile_memory=True), "
                         "nsys --cuda-memory-usage=true or a memory snapshot"),
    "memory_none": "no memory events",
    "no_memory_in_inputs": "no memory events in these inputs",
    "allocated_unknown": ("allocated unknown: the trace records CUDA's own allocations (what PyTorch calls reserved: "
                          "the caching allocator's segments and the libraries'), not PyTorch's tensors"),
    "peaks_before_start": _peaks_before_start,
    "peak_at_event": lambda v: ("the snapshot has no timestamps: its peak is "
                                + (f"at memory event {v['event']:,} of {v['events']:,}" if v["event"] is not None
                                   else f"before the first of its {v['events']:,} memory events")
                                + " (in the order the allocator recorded them)"),
    # gate
    "one_side_only": _one_side_only,
    "run_without_steps": ("no steps in its traces (proton records none, or no step ranges matched): only its run "
                          "folder's figures are judged"),
    "gate_load_differs": lambda v: (
        f"the machine was busy with other work to different degrees: load average {v['baseline_load_per_cpu']:.2f} "
        f"per CPU during the baseline, {v['candidate_load_per_cpu']:.2f} during the candidate (run.json); other "
        "work slows every step by itself, so a time verdict here may be the machine's: gate runs made on a "
        "quiet machine, or several a side (tracelab run --repeat N)"),
    "step_time_timed_differently": "step time timed differently (baseline {baseline}, candidate {candidate}): "
                                   "judged on the traced span of each run, as a step timed without the profiler "
                                   "is no match for one the profiler stretched",
    "gate_noise_repeats": lambda v: _gate_repeats(v) + _gate_level(v),
    "gate_noise_floor": lambda v: _gate_unmeasured(v) + _gate_level(v),
    "gate_noise_history": lambda v: _gate_history(v) + _gate_level(v),
    "gate_noise_sources": _gate_sources,
    "gate_history_unreadable": lambda v: (f"kept baseline version{'s' if len(v['versions']) > 1 else ''} "
                                          f"{', '.join(v['versions'])} could not be read: left out of the history"),
    "gate_peak_unreliable": _gate_unreliable,
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

    @classmethod
    def of(cls, doc: Note | str | dict) -> Note:
        """A note as `as_json` wrote it (a cache entry, a dataset part), or the text an older
        tracelab wrote (code "text"); ValueError for anything else, or values its words cannot use."""
        if isinstance(doc, Note):
            return doc
        if isinstance(doc, str):
            return cls("text", {"text": doc})
        if not (isinstance(doc, dict) and doc.get("code") in TEMPLATES and isinstance(doc.get("values", {}), dict)
                and isinstance(doc.get("where", []), list) and all(isinstance(w, str) for w in doc.get("where", []))
                and (doc.get("rank") is None or type(doc.get("rank")) is int)):
            raise ValueError("not a note: an object with a known code and its values, or a text")
        note = cls(doc["code"], doc.get("values", {}), tuple(doc.get("where", [])), doc.get("rank"))
        try:
            note.text
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ValueError(f"note {note.code!r} has values its words cannot use ({type(e).__name__}: {e})") from None
        return note

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
