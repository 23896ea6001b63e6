"""File and line of the provenance a report carries ("case.yaml:16 (deploy.train.mean)",
"deploy/compile_model.py line 17", "qa/compare_per_layer_out.txt row 4 (line 8)").

Provenance that names no file (a rule, "not given", this machine's environment) has no
location.
"""

from __future__ import annotations

import re

_PARTS = re.compile(r";|->")
_FORMS = (re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+)\b"),                   # case.yaml:16
          re.compile(r"^(?P<file>\S+) row \d+ \(line (?P<line>\d+)\)"),         # table rows
          re.compile(r"^(?P<file>\S+) line (?P<line>\d+)\b"),                   # scripts
          re.compile(r"^(?P<file>[^\s:]+\.[A-Za-z0-9]+)(?:\s|$)"))              # a file
_NOT_FILES = ("rule ", "this machine", "derived ", "not given")


def locations(sources) -> list[tuple[str, int | None]]:
    """(file, line or None) for every place ``sources`` name, in order, each once."""
    found: dict[tuple[str, int | None], None] = {}
    for source in sources:
        for part in _PARTS.split(str(source or "")):
            part = part.strip()
            if not part or part.startswith(_NOT_FILES):
                continue
            for form in _FORMS:
                match = form.match(part)
                if match:
                    line = match.groupdict().get("line")
                    found.setdefault((match["file"], int(line) if line else None), None)
                    break
    return list(found)
