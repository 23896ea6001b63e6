"""An origin at one call of a module called several times with one quantizer (knowledge.md
R5.10): the module's one scale serves every call, so the call whose range differs is
clamped or coarse, and no setting of that quantizer fixes one call without the others.
The remedy is to give that call a module of its own.

Two sources say a module's calls share one quantizer: model_check_result's "used multi
times" table (a Horizon module owns its quantizer, whatever it is called for), and the
probe's ``layer_calls.csv``, where the origin's quantizer also quantizes another call of the
same module (an eager model's reused activation)."""

from __future__ import annotations

from qcdoctor.collectors.reading.fx_graph import split_call


def shared_call_facts(facts: list[dict], shared: dict[str, tuple[int, str, list]]
                      ) -> list[dict]:
    """``shared_call_origin`` facts: one per located origin (or second source) at a call of
    a shared module. ``shared``: module -> (times called, source, locations), from
    model_check_result."""
    out = []
    for origin in facts:
        if origin["type"] != "layer_origin" or not origin.get("located", True):
            continue
        for layer in (origin["layer"], origin.get("second_layer", "")):
            if not layer:
                continue
            module, call = split_call(layer)
            found = _shared(module, layer, origin, shared)
            if found is None:
                continue
            times, source, locations = found
            out.append({"type": "shared_call_origin", "analysis": origin["analysis"],
                        "layer": layer, "module": module, "call": call, "calls": times,
                        "drives": origin.get("drives", True), "source": source,
                        "locations": locations})
    return out


def _shared(module: str, layer: str, origin: dict, shared: dict):
    if module in shared:
        return shared[module]
    # the probe's calls: the origin's quantizer also quantizes another call of its module
    listed = origin.get("same_quantizer", "").removesuffix(" ...")
    others = [name for name in listed.split(", ") if name]
    calls = [name for name in others if split_call(name)[0] == module and name != layer]
    if calls:
        return len(calls) + 1, origin.get("source", ""), origin.get("locations", [])
    return None
