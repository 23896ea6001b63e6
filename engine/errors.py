"""Errors that reach the user as one clear message (file, place, problem, fix)."""

from __future__ import annotations


class QcdoctorError(Exception):
    """Bad input or usage: printed without a traceback, exit code 2."""

    def __init__(self, problem: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, fix: str | None = None):
        self.problem = problem
        self.file = file
        self.line = line
        self.key = key
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file:
            where = str(self.file)
            if self.line:
                where += f":{self.line}"
            where += ": "
        key = f"'{self.key}': " if self.key else ""
        text = f"{where}{key}{self.problem}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class RuleError(QcdoctorError):
    """A rule file does not follow the rule format (a packaging or authoring bug)."""
