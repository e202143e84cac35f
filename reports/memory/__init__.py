"""Where the memory went: per rank and step, the allocated and reserved totals, the
peak and what was live there, the allocator's own calls; across ranks and runs, the peaks side
by side and what stands out. `memory` (one rank) and `across` (ranks, runs) are pure; `memory_text`
and `memory_html` render. The package imports none of them: `tracelab memory --help` reads only
`command`."""
