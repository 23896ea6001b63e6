"""A report shown inside a notebook, and the user's matplotlib left as it was.

The HTML report is a whole page with its own stylesheet (rules for ``body``, ``h1``,
``table``): placed straight into a notebook's output it would restyle the notebook
around it. It is shown in an iframe whose ``srcdoc`` holds the page, so it looks as the
saved file does and touches nothing else; no network is needed (the plots are inline
SVG). With scripts allowed (a trusted notebook) the frame takes the height of the page.
"""

from __future__ import annotations

import html
import sys
from contextlib import contextmanager

# the frame's height before its page is laid out, or where scripts do not run
FRAME_HEIGHT_PX = 720
_FIT = ("this.style.height=(this.contentWindow.document.documentElement.scrollHeight+24)"
        "+'px'")


def framed(page: str, title: str) -> str:
    """``page`` (a whole HTML document) as a notebook output: an iframe holding it."""
    return (f'<iframe class="qcdoctor-report" title="{html.escape(title)}" '
            f'srcdoc="{html.escape(page, quote=True)}" '
            f'style="width:100%;height:{FRAME_HEIGHT_PX}px;border:1px solid #d0d7de;'
            f'border-radius:6px" onload="{_FIT}"></iframe>')


@contextmanager
def matplotlib_kept():
    """Draw the report's plots as the command line draws them (matplotlib's settings
    from its rc file, then the plots' own), and give matplotlib back as it was: every
    setting and the backend.

    The plots set their settings and the Agg backend process-wide, on their first
    drawing only. Left so, a notebook's figures would change size and fonts, and the
    switch to Agg turns the inline backend off (the user's figures no longer show). So
    the plots' set-up is made to run again inside this block, and again by whoever draws
    next outside it.
    """
    import matplotlib  # the plots import it anyway
    settings = matplotlib.rcParams
    backend = dict.get(settings, "backend")                 # unresolved: "auto" stays auto
    pyplot = sys.modules.get("matplotlib.pyplot")
    # with figures of the user's open, pyplot's backend is in use and a switch would close
    # them: the backend is named Agg only, so that the plots' switch to it changes nothing
    # (pyplot draws theirs with the backend it has; they are written out as SVG anyway)
    in_name_only = pyplot is not None and bool(pyplot.get_fignums())
    try:
        with matplotlib.rc_context():                      # every setting but the backend
            matplotlib.rc_file_defaults()
            _plots_set_up_again()
            if in_name_only:
                dict.__setitem__(settings, "backend", "agg")
            yield
    finally:                                # an interrupted drawing too
        _plots_set_up_again()
        if in_name_only:
            dict.__setitem__(settings, "backend", backend)
        else:
            _restore_backend(matplotlib, backend)


def _plots_set_up_again() -> None:
    """The plots make their settings once, on their first drawing (a cached set-up);
    with those settings taken back, the next drawing must make them again."""
    from qcdoctor.engine.reports import plots
    clear = getattr(getattr(plots, "_pyplot", None), "cache_clear", None)
    if clear is not None:
        clear()


def _restore_backend(matplotlib, backend) -> None:
    if dict.get(matplotlib.rcParams, "backend") == backend:
        return
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        dict.__setitem__(matplotlib.rcParams, "backend", backend)
        return
    pyplot.switch_backend(backend)
    if isinstance(backend, str) and backend.endswith("inline"):
        # switched back, the inline backend no longer shows figures: IPython's own
        # switch (what %matplotlib inline runs) hooks it up again
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is not None:
            shell.enable_matplotlib("inline")
