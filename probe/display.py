"""How a probe result shows itself in a notebook: what was compared, where the error starts,
and the per-layer chart the HTML report draws, read back from the files the probe wrote (so
the notebook shows exactly what a triage of the folder will read)."""

from __future__ import annotations

import html
from pathlib import Path


def probe_html(result, lang: str | None = None) -> str:
    """A self-contained HTML fragment: a summary line, the error origin when the layer
    reading finds one, and the per-layer chart (SVG, no script, no network), with styles
    scoped to it (the reports' fonts; nothing wider than the notebook's output)."""
    from qcdoctor.collectors.reading.compare_layers import read_folder
    from qcdoctor.collectors.series import layer_series
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.engine.reports.plots import layer_curve
    from qcdoctor.safe_text import visible, visible_data
    from qcdoctor.templating import render_template
    from qcdoctor.wording import labels
    lang = chosen_language(lang)     # no case here: lang=, else the locale
    words = labels()[lang]["probe"]
    parts = [f"<p>{html.escape(visible(_summary(result, words, lang)))}</p>"]
    table = Path(result.out_dir) / "compare_per_layer_out.csv"
    if result.compared and table.is_file():
        layers, reading = read_folder(table)
        series = visible_data(layer_series(layers, reading, Path(result.out_dir).name,
                                           table.name))
        if series["points"]:
            plot = layer_curve(series, 0, labels()[lang])
            parts.append(f'<figure class="plot">{plot.svg}<figcaption id="{plot.id}-caption">'
                         f"{html.escape(plot.caption)}</figcaption></figure>")
    # the styles last: the summary stays the fragment's first text
    parts.append(f"<style>{render_template('probe_style.css.j2')}</style>")
    return '<div class="qcdoctor-probe">' + "".join(parts) + "</div>"


def probe_markdown(result, lang: str | None = None) -> str:
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.wording import labels
    lang = chosen_language(lang)     # no case here: lang=, else the locale
    return _summary(result, labels()[lang]["probe"], lang)


def _summary(result, words: dict, lang: str) -> str:
    from qcdoctor.text import render as fill
    return fill(words["done"], {"rows": len(result.rows), "out": str(result.out_dir),
                                "files": len(result.files)}, lang)
