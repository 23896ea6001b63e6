"""The report's plots: matplotlib figures as inline SVG, from the ``series`` section.

Only the HTML report imports this module (matplotlib is heavy). Output is deterministic,
so golden files stay byte-stable: a fixed hash salt for the SVG ids, no date nor creator
in the metadata, text kept as SVG text (escaped by matplotlib, never parsed as mathtext)
so the browser draws it with the page's system fonts, Chinese included.

The process's matplotlib settings are never written: a notebook's own settings, and its
other threads, are left alone while a report draws. Instead, the thread drawing a plot
reads its own settings (``SETTINGS`` over matplotlib's rc file) wherever matplotlib reads
``rcParams``; every other thread reads the process's as it set them. Plots are drawn one
at a time in a process (matplotlib's caches are shared), so reports rendered from several
threads at once come out as each does alone.

A value no chart can show (not finite, or beyond any measurement) is left out of its
chart, and the chart's caption says how many were.
"""

from __future__ import annotations

import io
import math
import re
import threading
from dataclasses import dataclass
from functools import lru_cache, partial, wraps

from qcdoctor.collector import collector_paused
from qcdoctor.engine.reports.view import FIX_TRIALS_SHOWN
from qcdoctor.safe_text import visible_data
from qcdoctor.vocabulary import stage_label

# status -> colour; every status is also told by a marker or a text mark, never colour alone
RED, AMBER, GREEN, GREY, BLUE = "#c62828", "#b26a00", "#2e7d32", "#757575", "#1565c0"
STAGE_STYLE = {"normal": (GREEN, "o"), "abnormal": (RED, "X"), "unknown": (AMBER, "s")}
LABEL_CHARS = 48          # names longer than this are cut in axis labels (kept whole in JSON)
# a value beyond this is no measurement (float32 ends at 3.4e38): a chart leaves it out, as
# it does a value that is not finite; matplotlib's axis arithmetic overflows near 1.8e308
ABSURD = 1e100
ANY = (-ABSURD, ABSURD)
COSINE = (-1.001, 1.001)  # a cosine similarity, rounding aside


@dataclass
class Plot:
    id: str
    kind: str           # stages, layers, sensitivity, dumps, samples, fixes, audit: where shown
    caption: str
    svg: str


# the plots' own matplotlib settings, over matplotlib's defaults from its rc file
SETTINGS = {
    "svg.hashsalt": "qcdoctor", "svg.fonttype": "none", "text.parse_math": False,
    "font.family": "sans-serif", "font.size": 9, "axes.titlesize": 10, "figure.dpi": 72,
    # a title at a fixed height: placing it above the tick labels measures them all
    "axes.titley": 1.0, "axes.titlepad": 6.0}


# the settings that are the process's, not a style: always read as the process set them
# (matplotlib's own list, style.STYLE_BLACKLIST); the rc file's backend, read, would
# choose a backend and import pyplot
_PROCESS_KEYS = frozenset((
    "backend", "backend_fallback", "date.epoch", "docstring.hardcopy",
    "figure.max_open_warning", "figure.raise_window", "interactive", "savefig.directory",
    "timezone", "tk.window_focus", "toolbar", "webagg.address", "webagg.open_in_browser",
    "webagg.port", "webagg.port_retries"))
# one plot drawn at a time in this process (whatever thread asks)
_DRAWING = threading.Lock()
# the settings the thread drawing a plot reads (None in every other thread)
_thread = threading.local()


@lru_cache(maxsize=1)
def _matplotlib():
    """matplotlib with its figure and SVG modules, imported once (before a fork). pyplot is
    never imported: no backend is chosen, and a notebook's own figures are left alone."""
    import matplotlib
    import matplotlib.backends.backend_svg  # noqa: F401 - savefig's SVG canvas
    import matplotlib.figure  # noqa: F401
    _read_per_thread(matplotlib)
    _quiet_missing_glyphs()
    return matplotlib


def _read_per_thread(matplotlib) -> None:
    """Make every read of ``matplotlib.rcParams`` in a thread drawing a plot answer from
    the plots' settings; other threads, and every write, see the process's own. All of
    matplotlib reads its settings through ``RcParams._get``, whose stability matplotlib
    guarantees."""
    read = matplotlib.RcParams._get
    if getattr(read, "plot_settings", False):
        return

    def _get(self, key):
        ours = getattr(_thread, "settings", None)
        if ours is not None and self is matplotlib.rcParams and key in ours:
            return ours[key]
        return read(self, key)
    _get.plot_settings = True
    matplotlib.RcParams._get = _get


def _quiet_missing_glyphs() -> None:
    """No warning of a glyph the layout font lacks (CJK text, which the browser draws with
    the page's system fonts) while a thread draws a plot; other threads warn as ever.
    matplotlib's font code looks this function up each time it warns; the warning
    filters are not changed for it (they are the whole process's, and other threads'
    ``catch_warnings`` would restore them over ours)."""
    import matplotlib._text_helpers as helpers
    warn = getattr(helpers, "warn_on_missing_glyph", None)
    if warn is None or getattr(warn, "plot_settings", False):
        return

    def warn_on_missing_glyph(*args, **kwargs):
        if getattr(_thread, "settings", None) is None:
            warn(*args, **kwargs)
    warn_on_missing_glyph.plot_settings = True
    helpers.warn_on_missing_glyph = warn_on_missing_glyph


@lru_cache(maxsize=1)
def _plot_settings() -> dict:
    """The settings every plot is drawn with: matplotlib's own from its rc file, as
    ``rc_file_defaults`` restores them (the process's settings aside: a caller's font
    size or style never reaches a report), with ``SETTINGS`` over them; checked by
    matplotlib as a setting made by hand is."""
    matplotlib = _matplotlib()
    checked = matplotlib.RcParams()
    for key, value in SETTINGS.items():
        checked[key] = value
    defaults = matplotlib.rcParamsOrig
    settings = {key: dict.__getitem__(defaults, key) for key in dict.keys(defaults)
                if key not in _PROCESS_KEYS}
    settings.update((key, dict.__getitem__(checked, key)) for key in SETTINGS)
    return settings


def _with_settings(draw):
    """``draw`` run with the plots' settings, read by this thread alone, one drawing at a
    time (the same drawing in a command, a notebook, a forked child or a thread)."""
    @wraps(draw)
    def drawn(*args, **kwargs):
        settings = _plot_settings()
        with _DRAWING:
            _thread.settings = settings
            try:
                return draw(*args, **kwargs)
            finally:
                _thread.settings = None
    return drawn


def _short(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[:LABEL_CHARS - 1] + "…"


def _svg(fig, plot_id: str) -> str:
    """The figure as an inline <svg>, its ids prefixed so several can share a page."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg",
                metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r'\bid="', f'id="{plot_id}-', text)
    text = text.replace("url(#", f"url(#{plot_id}-").replace('href="#', f'href="#{plot_id}-')
    return text.replace("<svg ", f'<svg role="img" aria-labelledby="{plot_id}-caption" ', 1)


def _text_inches(texts, size: float = 8) -> float:
    """The width of the longest text: about 0.55 em a character, 1 em a wide (CJK) one."""
    import unicodedata

    def ems(text: str) -> float:
        return sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.55 for c in text)
    return max((ems(t) for t in texts), default=0.0) * size / 72


def _figure(width: float, height: float, rows: int = 1, *, left: float = 0.8,
            bottom: float = 0.6, right: float = 0.2, top: float = 0.35, **kwargs):
    """A figure with margins in inches (fixed margins: a layout engine costs a second
    text layout pass, most of a plot's time)."""
    fig = _matplotlib().figure.Figure(figsize=(width, height))
    axes = fig.subplots(rows, 1, squeeze=False, **kwargs)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                        top=1 - top / height, hspace=0.12)
    # axis labels pinned near the figure's edges, inside the margins made for the tick
    # labels: placing them beside the tick labels measures every one of those
    from matplotlib.ticker import MaxNLocator
    for ax in axes[:, 0]:
        for axis in (ax.xaxis, ax.yaxis):   # a few ticks: each one is five artists to draw
            axis.set_major_locator(MaxNLocator(nbins=6))
        box = ax.get_position()
        ax.yaxis.set_label_coords(-(left - 0.14) / (box.width * width), 0.5)
        ax.xaxis.set_label_coords(0.5, -(box.y0 * height - 0.2) / (box.height * height))
    return fig, axes


def _log_axis(ax) -> None:
    """A log scale with plain tick labels (the default ones are mathtext, which is off)."""
    from matplotlib.ticker import FuncFormatter, NullLocator
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_locator(NullLocator())   # unlabelled minor ticks: most of the plot's time


def _yes_no(value: bool, L: dict) -> str:
    return L["yes"] if value else L["no"]


def _drawable(value, low: float, high: float) -> bool:
    """Whether a chart can show ``value``: a finite number from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return low <= value <= high             # compared whole: no float holds some ints
    return math.isfinite(value) and low <= value <= high


def _charted(rows: list[dict], bounds: dict[str, tuple[float, float]],
             left_as: float | None = None) -> tuple[list[dict], int]:
    """``rows`` (copies) with every value of the fields in ``bounds`` that no chart can show
    set to ``left_as`` (None: a gap, as a value not measured; NaN: a bar not drawn), and
    how many were; values not measured (None) stay as they are."""
    charted, left_out = [], 0
    for row in rows:
        row = dict(row)
        for name, (low, high) in bounds.items():
            if row.get(name) is not None and not _drawable(row[name], low, high):
                row[name] = left_as
                left_out += 1
        charted.append(row)
    return charted, left_out


def _noted(caption: str, left_out: int, L: dict) -> str:
    """``caption``, saying how many values the chart left out."""
    if not left_out:
        return caption
    return f"{caption} {L['view']['plot']['left_out'].format(count=left_out)}"


def charted_stages(stages: list[dict]) -> list[dict]:
    """The stages the chart shows: each evaluated one and its neighbours in the chain (where
    a drop could sit), not every step a model can go through."""
    evaluated = [i for i, s in enumerate(stages) if s["value"] is not None]
    kept = {j for i in evaluated for j in (i - 1, i, i + 1) if 0 <= j < len(stages)}
    return [s for i, s in enumerate(stages) if i in kept]


# inches of the stage chart's axis the stage labels share; wider ones are turned 30 degrees
AXIS_INCHES = 7.4


@_with_settings
def stage_chain(series: dict, L: dict, lang: str) -> Plot:
    P = L["view"]["plot"]
    every, left_out = _charted(series["stages"], {"value": ANY, "reference_value": ANY,
                                                  "tolerance": (0.0, ABSURD)})
    stages = charted_stages(every)
    labels = [stage_label(s["stage"], lang) for s in stages]
    values = [s["value"] if s["value"] is not None else math.nan for s in stages]
    turned = _text_inches(labels, 9) > AXIS_INCHES / max(len(labels), 1)
    below = 0.55 + (_text_inches(labels, 9) * 0.5 if turned else 0.2)
    fig, axes = _figure(8.5, 2.8 + below, bottom=below)
    ax = axes[0][0]
    ax.plot(range(len(stages)), values, color="#90a4ae", linewidth=1.2, zorder=1)
    for status, (colour, marker) in STAGE_STYLE.items():
        xs = [i for i, s in enumerate(stages) if s["status"] == status and s["value"] is not None]
        if xs:
            ax.scatter(xs, [values[i] for i in xs], color=colour, marker=marker, s=60, zorder=3,
                       label=L["statuses"][status])
    banded = False
    for i, s in enumerate(stages):
        if s["reference_value"] is None or s["tolerance"] is None:
            continue
        ref, limit = s["reference_value"], s["tolerance"]
        low, high = (ref - limit, ref) if s["direction"] != "lower" else (ref, ref + limit)
        ax.fill_between([i - 0.3, i + 0.3], [low, low], [high, high], color=GREEN, alpha=0.18,
                        zorder=0, label=None if banded else P["tolerance"])
        banded = True
    first = series["first_abnormal"]
    if first and first in [s["stage"] for s in stages]:
        i = [s["stage"] for s in stages].index(first)
        ax.axvline(i, color=RED, linestyle="--", linewidth=1,
                   label=P["first_abnormal"].format(stage=labels[i]))
    ax.set_xticks(range(len(stages)), labels, rotation=30 if turned else 0,
                  ha="right" if turned else "center")
    ax.set_xlim(-0.5, max(len(stages), 1) - 0.5)
    ax.set_xlabel(P["stage_x"])
    metrics = sorted({s["metric"] for s in stages if s["metric"]})
    ax.set_ylabel(" / ".join(metrics) or P["stage_y"])
    ax.set_title(P["stage_title"])
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return Plot("plot-stages", "stages", _noted(P["stage_caption"], left_out, L),
                _svg(fig, "plot-stages"))


@_with_settings
def layer_curve(layers: dict, index: int, L: dict) -> Plot:
    P = L["view"]["plot"]
    points, left_out = _charted(layers["points"], {"cosine": COSINE, "atol": ANY,
                                                   "qscale_diff": ANY})
    x = [p["row"] for p in points]

    def line(key):
        return [p[key] if p[key] is not None else math.nan for p in points]
    by_row = {p["row"]: p for p in points}
    origin, worst = by_row.get(layers["origin_row"]), by_row.get(layers["worst_row"])
    fig, axes = _figure(8.5, 5.2, rows=2, sharex=True, left=0.85, bottom=0.5)
    top, bottom = axes[0][0], axes[1][0]
    from matplotlib.ticker import MaxNLocator
    bottom.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))    # rows are whole
    top.plot(x, line("cosine"), color=BLUE, linewidth=1, label="Cosine")
    atol = [v if v > 0 else math.nan for v in line("atol")]
    bottom.plot(x, atol, color="#6a1b9a", linewidth=1, label="Atol")
    if any(p["qscale_diff"] is not None for p in points):
        bottom.plot(x, line("qscale_diff"), color="#ef6c00", linewidth=1, linestyle=":",
                    label="max_qscale_diff")
    if any(not math.isnan(v) for v in atol):
        _log_axis(bottom)
    gaps = [p["row"] for p in points if p["gap"]]
    for i, row in enumerate(gaps):
        for ax in (top, bottom):
            ax.axvline(row, color=GREY, alpha=0.25, linewidth=1,
                       label=P["gap"] if i == 0 and ax is top else None)
    for point, key, colour, marker in ((origin, "origin", RED, "X"), (worst, "worst", "#000000", "v")):
        if point is None or point["cosine"] is None:
            continue
        if key == "worst" and point is origin:
            continue
        top.scatter([point["row"]], [point["cosine"]], color=colour, marker=marker, s=70, zorder=4,
                    label=f"{P[key]}: {_short(point['name'])}")
        top.annotate(_short(point["name"]), (point["row"], point["cosine"]),
                     textcoords="offset points", xytext=(6, -12 if key == "origin" else 6),
                     fontsize=8, color=colour)
    top.set_ylabel("Cosine")
    bottom.set_ylabel("Atol / max_qscale_diff")
    bottom.set_xlabel(P["layer_x"])
    top.set_title(P["layer_title"].format(name=layers["source"]))
    top.grid(alpha=0.3)
    bottom.grid(alpha=0.3)
    top.legend(loc="lower left", fontsize=8)
    bottom.legend(loc="upper left", fontsize=8)
    if origin is None:
        caption = P["layer_caption_none"]
    elif worst is None or worst is origin:
        caption = P["layer_caption_same"].format(origin=origin["name"])
    else:
        caption = P["layer_caption"].format(origin=origin["name"], worst=worst["name"])
    if layers["decimated"]:
        caption += " " + P["layer_decimated"].format(shown=len(points), rows=layers["rows"])
    plot_id = f"plot-layers-{index}"
    return Plot(plot_id, "layers", _noted(caption, left_out, L), _svg(fig, plot_id))


@_with_settings
def sensitivity_bars(table: dict, index: int, L: dict) -> Plot:
    P = L["view"]["plot"]
    # most sensitive at the top
    ops, left_out = _charted(table["ops"][::-1], {"value": ANY}, math.nan)
    # an op listed for its activation and its weight says which bar is which
    names = [o["op"] for o in ops]
    labels = [_short(o["op"]) + (P["sens_kind"].format(kind=P["kinds"].get(o["kind"], o["kind"]))
                                 if names.count(o["op"]) > 1 else "") for o in ops]
    left = 0.45 + _text_inches(labels)
    fig, axes = _figure(8.5, 1.2 + 0.28 * max(len(ops), 1), left=left, bottom=0.5)
    ax = axes[0][0]
    values = [o["value"] if o["value"] is not None else 0.0 for o in ops]
    colours = [RED if o["lut"] else BLUE for o in ops]
    hatches = ["//" if o["lut"] else "" for o in ops]
    bars = ax.barh(range(len(ops)), values, color=colours)
    for bar, hatch in zip(bars, hatches, strict=True):
        bar.set_hatch(hatch)
    ax.set_yticks(range(len(ops)), labels, fontsize=8)
    title = P["sens_title"].format(output=table["output"], metric=table["metric"])
    ax.set_title(title)
    ax.set_xlabel(P["sens_x"].format(metric=table["metric"]))
    ax.set_ylabel(P["sens_y"])
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(facecolor=RED, hatch="//", label=P["lut"]),
                       Patch(facecolor=BLUE, label=P["other_op"])], loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    caption = P["sens_caption"].format(flat=_yes_no(table["flat"], L),
                                       tail=_yes_no(table["tail_near_zero"], L),
                                       dominant=_yes_no(table["dominant"], L))
    plot_id = f"plot-sensitivity-{index}"
    return Plot(plot_id, "sensitivity", _noted(caption, left_out, L), _svg(fig, plot_id))


@_with_settings
def dump_bars(pair: dict, index: int, L: dict, lang: str) -> Plot:
    P = L["view"]["plot"]
    outputs, left_out = _charted(pair["outputs"], {"cosine": COSINE, "max_abs": ANY}, math.nan)
    names = [_short(o["output"]) for o in outputs]
    below = 0.55 + _text_inches(names, 9) * 0.5
    fig, axes = _figure(8.5, 3.6 + below, rows=2, sharex=True, bottom=below)
    top, bottom = axes[0][0], axes[1][0]
    xs = range(len(outputs))
    top.bar(xs, [o["cosine"] if o["cosine"] is not None else 0.0 for o in outputs], color=BLUE,
            label=P["dump_cos"])
    bottom.bar(xs, [o["max_abs"] if o["max_abs"] is not None else 0.0 for o in outputs],
               color="#6a1b9a", label=P["dump_max"])
    bad = [i for i, o in enumerate(outputs) if o["status"] != "compared"]
    for i in bad:
        top.annotate("✗", (i, 0), ha="center", va="bottom", color=RED, fontsize=12)
    if bad:
        top.scatter(bad, [0] * len(bad), marker="x", color=RED, label=P["dump_missing"])
    top.set_ylabel(P["dump_cos"])
    bottom.set_ylabel(P["dump_max"])
    bottom.set_xticks(list(xs), names, rotation=30, ha="right")
    bottom.set_xlabel(P["dump_x"])
    title = P["dump_title"].format(left=stage_label(pair["left"], lang),
                                   right=stage_label(pair["right"], lang))
    top.set_title(title)
    top.legend(loc="lower left", fontsize=8)
    bottom.legend(loc="upper left", fontsize=8)
    plot_id = f"plot-dumps-{index}"
    return Plot(plot_id, "dumps", _noted(P["dump_caption"], left_out, L), _svg(fig, plot_id))


@_with_settings
def fix_bars(run: dict, index: int, L: dict, shown: int) -> Plot:
    """The output error each trial of one fix_trials.yaml removed (its ``shown`` best, the
    best at the top) and the greedy set's, against the target: green reaches it, blue
    falls short, float (the upper bound, no remedy) grey and hatched."""
    F = L["fixes"]
    C = F["chart"]
    trials, left_out = _charted(run["trials"][:shown], {"error_removed": ANY}, math.nan)
    bars = [(f"{F['fix'][t['fix']]}: {_short(', '.join(t['layers']))}", t["error_removed"],
             "float" if t["fix"] == "float" else "reaches" if t["reaches"] else "short")
            for t in trials]
    if run.get("greedy") is not None:
        (greedy,), more = _charted([run["greedy"]], {"error_removed": ANY}, math.nan)
        left_out += more
        bars.insert(0, (C["greedy"].format(size=len(greedy["layers"])), greedy["error_removed"],
                        "greedy"))
    style = {"reaches": (GREEN, ""), "short": (BLUE, ""), "float": (GREY, "//"),
             "greedy": (AMBER, "..")}
    bars = bars[::-1]                               # the first bar at the top
    left = 0.45 + _text_inches([label for label, _, _ in bars])
    fig, axes = _figure(8.5, 1.5 + 0.28 * max(len(bars), 1), left=left, bottom=0.55)
    ax = axes[0][0]
    drawn = ax.barh(range(len(bars)), [value for _, value, _ in bars],
                    color=[style[kind][0] for _, _, kind in bars])
    for bar, (_, _, kind) in zip(drawn, bars, strict=True):
        bar.set_hatch(style[kind][1])
    ax.set_yticks(range(len(bars)), [label for label, _, _ in bars], fontsize=8)
    target = run["target"]["error_removed"]
    handles = []
    from matplotlib.lines import Line2D
    if _drawable(target, *ANY):
        ax.axvline(target, color=RED, linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color=RED, linestyle="--", label=C["target"].format(
            target=f"{target:.0%}")))
    else:
        left_out += 1
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.0%}"))
    ax.set_xlim(min([0.0, *(value for _, value, _ in bars if math.isfinite(value))]), 1.0)
    ax.set_title(C["title"].format(analysis=_short(run["analysis"])))
    ax.set_xlabel(C["x"])
    ax.set_ylabel(C["y"])
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch
    kinds = {kind for _, _, kind in bars}
    handles += [Patch(facecolor=style[kind][0], hatch=style[kind][1], label=C[kind])
                for kind in ("reaches", "short", "float") if kind in kinds]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    plot_id = f"plot-fixes-{index}"
    return Plot(plot_id, "fixes", _noted(C["caption"], left_out, L), _svg(fig, plot_id))


@_with_settings
def sample_cosines(search: dict, index: int, L: dict) -> Plot:
    """A probe's bad-case search: the chosen output's Cosine of every sample, sorted worst
    first, against the clean band's lower edge (dashed; below it the error shows), with
    the sample the layers were read on marked."""
    P = L["view"]["plot"]
    points, left_out = _charted(search["points"], {"cosine": COSINE})
    drawn = [p for p in points if p["cosine"] is not None]
    tolerance = search["tolerance"]
    fig, axes = _figure(8.5, 3.4)
    ax = axes[0][0]
    ax.plot([p["position"] for p in drawn], [p["cosine"] for p in drawn], color=BLUE,
            linewidth=1, marker="o", markersize=3, label=P["sample_values"])
    values = [p["cosine"] for p in drawn] + [tolerance]
    low, high = min(values), max(values)
    pad = max((high - low) * 0.08, 1e-4)
    ax.set_ylim(low - pad, min(high + pad, COSINE[1]))
    ax.axhspan(low - pad, tolerance, color=RED, alpha=0.07, label=P["sample_shown"])
    ax.axhline(tolerance, color=RED, linestyle="--", linewidth=1,
               label=P["sample_tolerance"].format(tolerance=f"{tolerance:.6g}"))
    chosen, position = search["chosen_cosine"], search["chosen_position"]
    if chosen is not None and position is not None and _drawable(chosen, *COSINE):
        ax.scatter([position], [chosen], color="#000000", marker="v", s=70, zorder=4,
                   label=P["sample_chosen"].format(sample=search["chosen"]))
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))     # positions are whole
    last = drawn[-1]["position"] if drawn else 0          # the best sample's place
    ax.set_xlim(-0.5, max(last, 1) + 0.5)
    ax.set_xlabel(P["sample_x"])
    ax.set_ylabel("Cosine")
    ax.set_title(P["sample_title"].format(analysis=_short(search["analysis"]),
                                          output=_short(search["output"])))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)

    def shown(value) -> str:
        return "—" if value is None else f"{value:.6g}"
    caption = P["sample_caption"].format(shown=search["shown_on"], count=search["count"],
                                         tolerance=f"{tolerance:.6g}", output=search["output"],
                                         median=shown(search["median"]),
                                         worst=shown(search["worst"]), chosen=search["chosen"])
    if search["chosen_position"] is None:
        caption += " " + P["sample_chosen_off"].format(chosen=search["chosen"])
    if search["decimated"]:
        caption += " " + P["sample_decimated"].format(shown=len(points), count=search["count"])
    plot_id = f"plot-samples-{index}"
    return Plot(plot_id, "samples", _noted(caption, left_out + search["nonfinite"], L),
                _svg(fig, plot_id))


def report_plots(report: dict, L: dict, kinds: set[str] | None = None) -> list[Plot]:
    """Every plot the report's data supports, in reading order; only ``kinds`` when given
    (an audit page shows the checklist alone: the rest would be drawn for nothing)."""
    lang = report["language"]
    # every text drawn is case text made visible (common/safe_text.py): controls would
    # reach the SVG, and matplotlib cannot lay out lone surrogates (undecodable names)
    series = visible_data(report["series"])
    drawings = []
    if any(s["value"] is not None for s in series["stages"]):
        drawings.append(("stages", partial(stage_chain, series, L, lang)))
    drawings += [("layers", partial(layer_curve, t, i, L))
                 for i, t in enumerate(series["layers"]) if t["points"]]
    drawings += [("sensitivity", partial(sensitivity_bars, t, i, L))
                 for i, t in enumerate(series["sensitivity"]) if t["ops"]]
    drawings += [("dumps", partial(dump_bars, p, i, L, lang))
                 for i, p in enumerate(series["dumps"]) if p["outputs"]]
    drawings += [("samples", partial(sample_cosines, t, i, L))
                 for i, t in enumerate(series.get("samples") or []) if t["points"]]
    # index i matches the view's plot-fixes-i of the same file
    drawings += [("fixes", partial(fix_bars, run, i, L, FIX_TRIALS_SHOWN))
                 for i, run in enumerate(visible_data(report.get("fix_trials") or []))
                 if run["trials"] or run.get("greedy")]
    return _drawn([draw for kind, draw in drawings if kinds is None or kind in kinds])


def _drawn(drawings: list) -> list[Plot]:
    """Every drawing's plot, in order; with two or more, every other one is drawn in a
    forked child meanwhile (a plot is all CPU: the second core halves the wait)."""
    from qcdoctor.engine.matching.forked import MISSING, ForkedCall
    _matplotlib()                               # imported once, before the fork
    with collector_paused():
        if len(drawings) < 2:
            return [draw() for draw in drawings]
        theirs = drawings[1::2]
        child = ForkedCall(lambda: [draw() for draw in theirs]).start()
        mine = [draw() for draw in drawings[0::2]]
        drawn = child.result()
        if drawn is MISSING:                    # drawn here instead, errors as always
            drawn = [draw() for draw in theirs]
    plots = [None] * len(drawings)
    plots[0::2], plots[1::2] = mine, drawn
    return plots


