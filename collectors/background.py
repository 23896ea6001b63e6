"""Collecting a case's facts in a forked child while the command loads the rest of itself.

On the command line most of a run is imports: the collectors (and pandas, numpy or torch
for a case with tables or dumps) in the part that reads the case, the engine and report
code in the part that judges it. With ``fork`` the child reads the case while the parent
loads the rest, on the other core. Where fork is missing, or the child fails in any way,
the facts are collected in the parent as usual, so errors are worded exactly as always.
"""

from __future__ import annotations

import os
import pickle
import sys

from .case_file import Case
from .files import CaseFiles


class Collection:
    """A case being collected; ``result()`` waits for its (facts, plot series)."""

    def __init__(self, case: Case, files: CaseFiles, options: dict):
        self._case, self._files, self._options = case, files, options
        self._child: int | None = None
        self._pipe: int | None = None

    def start(self) -> Collection:
        if not hasattr(os, "fork"):
            return self
        for stream in (sys.stdout, sys.stderr):    # nothing buffered may be written twice
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:                              # the child: collect, send, leave
            os.close(read_end)
            _collect_and_send(self._case, self._files, self._options, write_end)
        os.close(write_end)
        self._child, self._pipe = child, read_end
        return self

    def result(self) -> tuple[list[dict], list[dict]]:
        """(facts, plot series); what the child read or refused is recorded in ``files`` as
        if read here."""
        if self._child is not None:
            received = self._receive()
            if received is not None:
                collected, read, refused = received
                self._files.read |= read
                self._files.refused.update(refused)
                return collected
        from .case_facts import collect_case
        return collect_case(self._case, files=self._files, **self._options)

    def _receive(self):
        chunks = []
        try:
            while chunk := os.read(self._pipe, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(self._pipe)
            _, status = os.waitpid(self._child, 0)
            self._child = None
        if status != 0 or not chunks:
            return None                 # it failed or died: collect here, to say why
        return pickle.loads(b"".join(chunks))


def _collect_and_send(case: Case, files: CaseFiles, options: dict, pipe: int) -> None:
    code = 1
    try:
        from .case_facts import collect_case
        collected = collect_case(case, files=files, **options)
        data = pickle.dumps((collected, files.read, files.refused), pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(pipe, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - the parent collects again and reports it
        pass
    finally:
        os._exit(code)              # never the parent's exit handlers or buffers


def collect_early(case: Case, files: CaseFiles, **options) -> Collection:
    """Start collecting the facts of ``case`` (``collect_case`` options); see the module."""
    return Collection(case, files, options).start()
