"""A report shown inside a notebook.

The HTML report is a whole page with its own stylesheet (rules for ``body``, ``h1``,
``table``): placed straight into a notebook's output it would restyle the notebook
around it. It is shown in an iframe whose ``srcdoc`` holds the page, so it looks as the
saved file does and touches nothing else; no network is needed (the plots are inline
SVG). With scripts allowed (a trusted notebook) the frame takes the height of the page.
"""

from __future__ import annotations

import html

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
