"""A validated case as the rest of qcdoctor sees it: its values, where each key stands in
case.yaml, its folder. Apart from ``case_file``, which reads and checks case files
(and imports PyYAML and the schema to do it): a report is built from a case read in
another process without loading any of that."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

CASE_FILE = "case.yaml"


@dataclass
class Case:
    """A validated case: its values, where each key stands, and its folder."""
    folder: Path | None         # None: a case given as text, with no folder
    file: Path | None
    data: dict
    lines: dict[str, int] = field(default_factory=dict)
    # what sources name: the case file, or nothing for a case built in Python (its keys
    # are cited alone: there is no file line to point at)
    source_name: str = CASE_FILE

    def source(self, key: str) -> str:
        """Provenance of a key path, e.g. ``case.yaml:12 (stages.qat_bc)``."""
        if not self.source_name:
            return key
        line = self.lines.get(key)
        name = self.file.name if self.file else self.source_name
        return f"{name}:{line} ({key})" if line else f"{name} ({key})"

    def get(self, key: str, default=None):
        return self.data.get(key, default)
