"""qcdoctor's Python API: the command line's triage and audit as functions, a case built
from values (``Case``), and the report as typed objects (``Report``) that render in every
format and language and show themselves in Jupyter. ``import qcdoctor`` gives every name
here (loaded on first use); docs/python.md is the guide.

>>> import qcdoctor
>>> report = qcdoctor.triage(example="convert_j6e_no_retrain", lang="en")
>>> report.conclusion.stage
'convert'
"""

from qcdoctor.engine.api.case import Case
from qcdoctor.engine.api.errors import CaseError
from qcdoctor.engine.api.report import (
    ChecklistItem,
    ChecklistPart,
    Conclusion,
    Consistency,
    Evidence,
    Finding,
    KeptArtifact,
    MissingItem,
    NextAction,
    Pitfall,
    Report,
)
from qcdoctor.engine.api.run import audit, list_examples, triage

__all__ = ["Case", "CaseError", "ChecklistItem", "ChecklistPart", "Conclusion", "Consistency",
           "Evidence", "Finding", "KeptArtifact", "MissingItem", "NextAction", "Pitfall",
           "Report", "audit", "list_examples", "triage"]
