"""The error of a case that is not valid: a case.yaml read, or the values given to
``qcdoctor.Case``."""

from __future__ import annotations

from qcdoctor.errors import QcdoctorError


class CaseError(QcdoctorError):
    """The case is not valid: a key, a stage id or a value that case.yaml does not allow.

    ``key`` names the case.yaml key (``stages.qatt``, ``platform.chip``), ``problem`` what
    is wrong and ``fix`` what to write instead, with the nearest allowed word when one is
    close. A case read from a file also names the ``file`` and ``line``.
    """

    @classmethod
    def of(cls, error: QcdoctorError, *, placed: bool = True) -> CaseError:
        """``error`` as a CaseError; ``placed=False`` drops its file and line (a document
        the API generated, which the user never saw)."""
        if isinstance(error, cls) and placed:
            return error
        # every problem of the document, each as a CaseError of its own (``problems``)
        problems = [cls(p.problem, file=p.file if placed else None,
                        line=p.line if placed else None, key=p.key, fix=p.fix)
                    for p in error.problems]
        return cls.together(problems, limit=error.limit)
