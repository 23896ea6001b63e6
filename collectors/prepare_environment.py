"""What prepare says it ran with (model_check_result of plugin 3.x, knowledge.md R5.10):
its version lines and ``current march``, read as environment facts beside the others.

The order of trust is the one the case's other sources follow: what case.yaml says wins,
then what the case's own files say (here: the file prepare wrote), then the packages
installed on the machine qcdoctor runs on. A version case.yaml gives that the file
contradicts is a ``version_mismatch`` (which run does the case describe?); a march the
file gives joins the march comparison of the deployment checklist as ``prepare``, and names
the platform when nothing else does.
"""

from __future__ import annotations

from qcdoctor.collectors.platform import platform_fact
from qcdoctor.collectors.versions import parse_version, version_fact
from qcdoctor.fact_types import MARCHES
from qcdoctor.source_locations import at


def prepare_facts(found, rel: str) -> list[dict]:
    """``prepare_version`` and ``prepare_march`` facts of one read model_check_result
    (``found``: a ``model_check.ModelCheck``), each with its line."""
    facts = [{"type": "prepare_version", "package": package, "version": version,
              "source": f"{rel} line {line}", "locations": at(rel, line)}
             for package, (version, line) in sorted(found.versions.items())]
    if found.march is not None:
        march, line = found.march
        facts.append({"type": "prepare_march", "march": march,
                      "known": march in MARCHES[:-1],
                      "source": f"{rel} line {line}", "locations": at(rel, line)})
    return facts


def with_prepare_environment(environment: list[dict], artifacts: list[dict]) -> list[dict]:
    """``environment`` (platform and version facts) with what prepare said folded in, and
    the facts that compare the two."""
    versions = {f["package"]: f for f in artifacts if f["type"] == "prepare_version"}
    march = next((f for f in artifacts if f["type"] == "prepare_march" and f["known"]), None)
    out = []
    for fact in environment:
        if fact["type"] == "version" and fact["package"] in versions:
            out += _version(fact, versions[fact["package"]])
        elif fact["type"] == "platform" and not fact["known"] and march is not None:
            out.append({**platform_fact(None, march["march"], march["source"]),
                        "locations": march["locations"]})
        else:
            out.append(fact)
    return out


def _given(fact: dict) -> bool:
    return fact["known"] and fact["source"].startswith("case.yaml")


def _version(fact: dict, said: dict) -> list[dict]:
    if not _given(fact):            # the file prepare wrote speaks before this machine
        return [{**version_fact(fact["package"], said["version"], said["source"]),
                 "locations": said["locations"]}]
    given, found = parse_version(fact["version"]), parse_version(said["version"])
    same = given == found if given is not None and found is not None else \
        fact["version"].strip() == said["version"].strip()
    if same:
        return [fact]
    return [fact, {"type": "version_mismatch", "package": fact["package"],
                   "given": fact["version"], "found": said["version"],
                   "source": f"{fact['source']}; {said['source']}",
                   "locations": [*fact.get("locations", []), *said["locations"]]}]


def with_prepare_march(march_checks: list[dict], artifacts: list[dict]) -> list[dict]:
    """The march comparison with prepare's ``current march`` beside convert, compile, the
    platform and the board."""
    march = next((f for f in artifacts if f["type"] == "prepare_march" and f["known"]), None)
    if march is None:
        return march_checks
    out = []
    for check in march_checks:
        known = {k: check[k] for k in ("convert", "compile", "platform", "board")
                 if check.get(k) not in ("", "unknown", None)}
        known["prepare"] = march["march"]
        differing = len(set(known.values())) > 1
        consistent = "no" if differing else check["consistent"]
        out.append({**check, "prepare": march["march"], "consistent": consistent,
                    "differing": ", ".join(f"{k}={v}" for k, v in known.items())
                    if differing else "",
                    "source": f"{check['source']}; {march['source']}",
                    "locations": [*check.get("locations", []), *march["locations"]]})
    return out
