"""The engine worker's program run on durable_rules hosts in the benchmark's own process,
to see the worker's cost and where the engine's time goes. Call it only in a forked child:
durable_rules' C code runs only in a process that can die alone."""

from __future__ import annotations

from qcdoctor.engine.matching.runner import USUAL_TYPES, CaseProgram, stratum_rulesets


def program_on(hosts, rules) -> CaseProgram:
    """``rules`` registered on each of ``hosts`` (QuietHost, none used yet) stratum by
    stratum, as the worker does; the program that runs one case on any of them."""
    names = []
    for stratum, patterns in stratum_rulesets(rules):
        for host in hosts:
            host.register(f"s{stratum}", patterns, USUAL_TYPES)
        names.append((stratum, f"s{stratum}"))
    return CaseProgram(tuple(names), tuple(rules))
