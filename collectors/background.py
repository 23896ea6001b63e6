"""Collecting a case's facts in a forked child while the command loads the rest of itself.

On the command line most of a run is imports: the collectors (and pandas, numpy or torch
for a case with tables or dumps) in the part that reads the case, the engine and report
code in the part that judges it. With ``fork`` the child reads the case while the parent
loads the rest, on the other core. Where fork is missing, or the child fails in any way,
the facts are collected in the parent as usual, so errors are worded exactly as always.
"""

from __future__ import annotations

from qcdoctor.engine.forked import MISSING, ForkedCall

from .case_file import Case
from .files import CaseFiles


class Collection:
    """A case being collected; ``result()`` waits for its (facts, plot series), after which
    ``thresholds`` holds the (thresholds, sources) it was read with, when the child read it
    (a settings file is then parsed once, not in both processes)."""

    def __init__(self, case: Case, files: CaseFiles, options: dict):
        self._case, self._files, self._options = case, files, options
        self._child = ForkedCall(self._collect_for_parent)
        # (thresholds, their sources) as the child resolved them; None: resolve them here
        self.thresholds: tuple | None = None

    def start(self) -> Collection:
        self._child.start()
        return self

    def result(self) -> tuple[list[dict], list[dict]]:
        """(facts, plot series); what the child read or refused is recorded in ``files`` as
        if read here."""
        received = self._child.result()
        if received is not MISSING:
            collected, read, refused, self.thresholds = received
            self._files.read |= read
            self._files.refused.update(refused)
            return collected
        from .case_facts import collect_case
        return collect_case(self._case, files=self._files, **self._options)

    def _collect_for_parent(self):
        from .case_facts import collect_case
        from .threshold_settings import resolve
        resolved = resolve(self._case, self._options.get("use_env", True))
        collected = collect_case(self._case, files=self._files, thresholds=resolved[0],
                                 **self._options)
        return collected, self._files.read, self._files.refused, resolved


def collect_early(case: Case, files: CaseFiles, **options) -> Collection:
    """Start collecting the facts of ``case`` (``collect_case`` options); see the module."""
    return Collection(case, files, options).start()
