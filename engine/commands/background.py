"""Reading a case in a forked child while the command loads the rest of itself.

On the command line most of a run is imports: the case file's reader and schema (with
PyYAML), the collectors (and pandas, numpy or torch for a case with tables or dumps) in
the part that reads the case, the engine and report code in the part that judges it.
With ``fork`` the child reads the case while the parent loads the rest, on the other
core, and the parent never imports the reading part at all. Where fork is missing, or
the child fails in any way (a broken case.yaml included), the case is read in the
parent as usual, so errors are worded exactly as always.
"""

from __future__ import annotations

from pathlib import Path

from qcdoctor.engine.matching.forked import MISSING, ForkedCall


class Reading:
    """A case folder being read; ``result()`` waits for (case, files, (facts, plot series),
    thresholds), where ``files`` holds what was read or refused and ``thresholds`` the
    (values, sources) the case was read with; read again here when the child gave nothing."""

    def __init__(self, where: str | Path, allow_outside: tuple, options: dict):
        self._where, self._allow_outside, self._options = where, allow_outside, options
        self._child = ForkedCall(self._read_for_parent)

    def start(self) -> Reading:
        self._child.start()
        return self

    def result(self):
        received = self._child.result()
        return self._read_for_parent() if received is MISSING else received

    def _read_for_parent(self):
        from qcdoctor.collectors.case_facts import collect_case
        from qcdoctor.collectors.case_file import load_case
        from qcdoctor.collectors.files import CaseFiles
        from qcdoctor.collectors.threshold_sources import resolve
        case = load_case(self._where, self._allow_outside)
        files = CaseFiles(case.folder, self._allow_outside)
        resolved = resolve(case, self._options.get("use_env", True))
        collected = collect_case(case, files=files, thresholds=resolved[0], **self._options)
        return case, files, collected, resolved


def read_early(where: str | Path, allow_outside: tuple = (), **options) -> Reading:
    """Start reading the case at ``where`` (``collect_case`` options); see the module."""
    # what both sides need (dataclasses and the vocabulary, pickle, the case model) is
    # imported before the fork: one process pays for it, not both
    import pickle  # noqa: F401

    from qcdoctor import fact_types, vocabulary  # noqa: F401
    from qcdoctor.collectors import case as case_model  # noqa: F401
    return Reading(where, allow_outside, options).start()
