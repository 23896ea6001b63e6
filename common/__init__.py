"""qcdoctor: diagnose J6 training-to-deployment consistency problems.

The Python API (docs/python.md) is reached from here: ``qcdoctor.triage``,
``qcdoctor.audit``, ``qcdoctor.Case``, ``qcdoctor.Report`` and the report's parts. They
load on first use, so ``import qcdoctor`` itself stays as light as the command line's
start (no pandas, torch or durable_rules).
"""

__version__ = "0.1.0"

# the API's names, from qcdoctor.engine.api (the one import of the package root upwards:
# made on first use, when every floor below is loaded)
_API = ("Case", "CaseError", "ChecklistItem", "ChecklistPart", "Conclusion", "Consistency",
        "Evidence", "Finding", "KeptArtifact", "MissingItem", "NextAction", "Pitfall",
        "Report", "audit", "list_examples", "triage")
__all__ = ["QcdoctorError", "__version__", *_API]

TYPE_CHECKING = False            # typing itself is not imported for it: the root stays light
if TYPE_CHECKING:
    from qcdoctor.engine.api import *  # noqa: F403 - what __getattr__ gives, for type checkers
    from qcdoctor.errors import QcdoctorError  # noqa: F401


def __getattr__(name: str):
    """The API's names, imported when first asked for (then kept here)."""
    if name in _API:
        from qcdoctor.engine import api
        value = getattr(api, name)
    elif name == "QcdoctorError":
        from qcdoctor.errors import QcdoctorError as value
    else:
        raise AttributeError(f"module 'qcdoctor' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
