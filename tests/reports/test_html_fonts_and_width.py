"""Every HTML view (report, batch index, probe output, diff page) names the CJK fonts common
on Linux in its font stack, and nothing in it is wider than a 1280 px window, with a CJK
font installed and without one (Chromium, headless)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.reports.formats import render
from qcdoctor.probe.compare import ProbeResult
from qcdoctor.probe.display import probe_html
from tests.browser import chromium_path, launched_chromium
from tests.conftest import missing_in_ci, triage_dict
from tests.qa.writers import layer, write_compare

CJK_FONTS = ('"Noto Sans CJK SC"', '"Source Han Sans SC"', '"WenQuanYi Micro Hei"')
WIDTH = 1280
LONG = "backbone.stage4.block_17.attention_with_a_very_long_unbroken_module_name_" * 4


def probe_page(folder: Path, lang: str) -> str:
    """A probe's notebook output with long layer names and a long path, as a page."""
    out = folder / ("probe_run_" + "x" * 150)
    rows = [layer(f"{LONG}{i}", 0.9999 if i < 5 else 0.90) for i in range(10)]
    write_compare(out, rows, fmt="csv")
    result = ProbeResult(out, rows, [], [], compared=len(rows),
                         files=[out / "compare_per_layer_out.csv"])
    return (f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"></head><body>'
            f"{probe_html(result, lang)}</body></html>")


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """Every view, in both languages, written before the browser starts."""
    chromium_path()
    folder = tmp_path_factory.mktemp("views")
    out = {}
    for lang in ("en", "zh"):
        for name in example_names():
            with example_path(name) as path:
                report = triage_dict(json.loads(json.dumps(_case(path))), lang, path)
            out[f"report-{name}-{lang}"] = render(report, "html")
        out[f"probe-{lang}"] = probe_page(folder / lang, lang)
        long_case = folder / "cases" / (LONG[:120] + lang)
        with example_path("board_nv12_deploy") as source:
            shutil.copytree(source, long_case)
        batch = folder / f"batch-{lang}"
        main(["triage", str(long_case), str(folder / "missing" / LONG), "-j", "1", "--no-env",
              "--lang", lang, "--format", "html", "-o", str(batch)])
        out[f"batch-{lang}"] = (batch / "index.html").read_text(encoding="utf-8")
    files = {}
    for key, text in out.items():
        files[key] = folder / f"{key}.html"
        files[key].write_text(text, encoding="utf-8")
    return files


def _case(path: Path) -> dict:
    from qcdoctor.package_data import safe_yaml
    return safe_yaml((path / "case.yaml").read_text(encoding="utf-8"))


def test_every_view_names_the_cjk_fonts(pages):
    for key, page in pages.items():
        text = page.read_text(encoding="utf-8")
        # the page's (or the probe output's) own stack, not a chart's inside it
        start = text.index("body { font-family:" if "<style>" in text.split("<body>")[0]
                           else ".qcdoctor-probe { font-family:")
        stack = text[start:].split(":", 1)[1].split(";", 1)[0]
        assert all(font in stack for font in CJK_FONTS), key
        assert stack.strip().endswith("sans-serif"), key


@contextmanager
def fonts_without_cjk(folder: Path):
    """Chromium's fontconfig limited to the Latin fonts: no CJK font at all."""
    latin = [d for d in ("/usr/share/fonts/truetype/dejavu",
                         "/usr/share/fonts/truetype/liberation") if os.path.isdir(d)]
    config = folder / "fonts.conf"
    config.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
                      + "".join(f"<dir>{d}</dir>" for d in latin)
                      + f"<cachedir>{folder / 'cache'}</cachedir></fontconfig>", encoding="utf-8")
    before = os.environ.get("FONTCONFIG_FILE")
    os.environ["FONTCONFIG_FILE"] = str(config)
    try:
        yield
    finally:
        if before is None:
            del os.environ["FONTCONFIG_FILE"]
        else:
            os.environ["FONTCONFIG_FILE"] = before


def widths(pages: dict[str, Path]) -> dict[str, int]:
    """Each page's laid-out width in a 1280 px window."""
    shown = {}
    with launched_chromium() as chromium:
        context = chromium.new_context(viewport={"width": WIDTH, "height": 900})
        try:
            page = context.new_page()
            for key, file in pages.items():
                page.goto(file.as_uri())
                shown[key] = page.evaluate("document.documentElement.scrollWidth")
        finally:
            context.close()
    return shown


@pytest.mark.parametrize("cjk", [True, False], ids=["cjk-font", "no-cjk-font"])
def test_nothing_is_wider_than_the_window(pages, tmp_path, cjk):
    if cjk:
        listed = subprocess.run(["fc-list", ":lang=zh"], capture_output=True,
                                text=True).stdout if shutil.which("fc-list") else ""
        if not listed.strip():
            missing_in_ci("no CJK font installed (apt-get install fonts-wqy-microhei; .ci/run "
                          "installs it for CI): the Chinese pages would be measured in boxes")
        shown = widths(pages)
    else:
        with fonts_without_cjk(tmp_path):
            shown = widths(pages)
    wide = {key: width for key, width in shown.items() if width > WIDTH}
    assert not wide
    if not cjk and shutil.which("fc-list"):             # the fonts Chromium was given
        with fonts_without_cjk(tmp_path):
            listed = subprocess.run(["fc-list"], capture_output=True, text=True).stdout
        assert "WenQuanYi" not in listed and listed
