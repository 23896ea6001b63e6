"""Read and validate ``case.yaml`` (schema ``qcdoctor/case-v1``)."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors import limits
from qcdoctor.collectors.case import CASE_FILE, Case  # noqa: F401 - Case and CASE_FILE are read from here too
from qcdoctor.collectors.threshold_sources import threshold_specs
from qcdoctor.collectors.yaml_schema import (
    Choice,
    Flag,
    ListOf,
    Mapping,
    Number,
    Text,
    Version,
    load_document,
)
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import (
    ANALYSIS_TYPES,
    CHIPS,
    EVIDENCE_KINDS,
    MARCHES,
    PACKAGES,
    STAGES,
    STATUSES,
    USER_CHECKS,
)

SCHEMA_ID = "qcdoctor/case-v1"
TRISTATE = Choice(("yes", "no", "unknown"))

_BOARD_ONLY = ("stride", "uv_stride")
_side = Mapping(elsewhere={k: "deploy.board" for k in _BOARD_ONLY}, fields={
    "color": Choice(("rgb", "bgr", "yuv444", "nv12", "gray", "featuremap")),
    "layout": Choice(("NCHW", "NHWC")),
    "mean": ListOf(Number(), scalar_ok=True),
    "std": ListOf(Number(), scalar_ok=True),
    "divisor": Number(),
    "resize": Text(),
    "padding": Text(),
    "input_scale": Number(minimum=0),
    "height": Number(integer=True, minimum=1),
    "width": Number(integer=True, minimum=1),
    "input_source": Choice(("pyramid", "resizer", "ddr")),
})
# the board side alone has row strides: bytes from one row of the image input's Y plane
# (stride) and UV plane (uv_stride) to the next, judged against J6's 32-byte alignment
_board_side = Mapping({**_side.fields,
                       "stride": Number(integer=True, minimum=1),
                       "uv_stride": Number(integer=True, minimum=1)})

CASE_SCHEMA = Mapping({
    "schema": Text(const=SCHEMA_ID),
    "title": Text(),
    "language": Choice(("zh", "en")),
    "symptom": Text(),
    "evidence": ListOf(Choice(EVIDENCE_KINDS), scalar_ok=True),
    "badcase": Choice(("available", "dataset_only", "none")),
    "platform": Mapping({"chip": Choice(CHIPS[:-1]), "march": Choice(MARCHES[:-1])}),
    "versions": Mapping({p: Version() for p in PACKAGES}),
    "stages": Mapping({s: Mapping({"metric": Text(), "value": Number(),
                                   "status": Choice(STATUSES)}) for s in STAGES}),
    "tolerance": Mapping({"abs": Number(minimum=0), "rel": Number(minimum=0)}, one_of=True),
    "higher_is_better": Flag(),
    "retrain": TRISTATE,
    # 0-2; 3 and 4 exist only in the old (OE 3.5.0) numbering and imply it
    "consistency_level": Number(integer=True, minimum=0, maximum=4),
    "consistency_levels_tried": ListOf(Number(integer=True, minimum=0, maximum=4),
                                       scalar_ok=True),
    "consistency_numbering": Choice(("new", "old")),
    "fake_quant_state": Choice(("validation", "float", "unknown")),
    "input_format_differs": Flag(),
    "has_task_input": Flag(),
    # post-processing inside the model QuantAnalysis compared (knowledge.md §13 rev 2)
    "postprocess_in_model": TRISTATE,
    "analyses_run": ListOf(Mapping({
        "type": Choice(ANALYSIS_TYPES), "baseline": Choice(STAGES),
        "analysis": Choice(STAGES), "out_dir": Text(), "sensitivity": Flag(),
        "separate_runs": Flag(),
        # the tool that wrote out_dir: the Horizon profiler (default) or qcdoctor probe
        "origin": Choice(("profiler", "probe"))})),
    "user_checks": Mapping({c: TRISTATE for c in USER_CHECKS}),
    "deploy": Mapping({
        "train": _side, "board": _board_side,
        "nodes": Mapping({"inserted": ListOf(Text(), scalar_ok=True),
                          "removed": ListOf(Text(), scalar_ok=True)}),
        "postprocess_same": TRISTATE,
        "description": Text(),
        "script": Text(),
        "config": Text(),
    }),
    # QuantAnalysis reading thresholds (knowledge.md §8); see threshold_settings
    "thresholds": Mapping(threshold_specs()),
    "artifacts": Mapping({
        "quant_analysis": ListOf(Text(), scalar_ok=True),
        "model_check_result": Text(),
        "fx_graph": Text(),
        "hbm_perf": Text(),            # hbm_perf's forward.json
        "dumps": Mapping({s: Text() for s in STAGES}),
        "dump_dtype": Choice(("float32", "float16", "int8", "uint8", "int16", "int32")),
    }),
})


def resolve_case_path(path: str | Path, allow_outside: tuple = ()) -> tuple[Path, Path]:
    """A case is a folder holding case.yaml, or the case.yaml itself: (folder, file). The
    file passes the case folder's gate, as every artifact does: a symlink in the folder
    that leads out of it (to a folder not in ``allow_outside``) is refused, never read."""
    from qcdoctor.collectors.files import check_path_length
    check_path_length(path)             # pathlib's tests below would raise on it
    path = Path(path)
    if path.is_dir():
        folder, file = path, path / CASE_FILE
        if not file.is_file():
            raise QcdoctorError(f"no {CASE_FILE} in this folder", file=str(path),
                                fix=f"create {file} (see 'qcdoctor triage --example convert_j6e_no_retrain' "
                                    "for a model, or run 'qcdoctor intake')")
    elif path.is_file():
        folder, file = path.parent, path
    else:
        raise QcdoctorError("no such case folder or file", file=str(path),
                            fix="give a folder with case.yaml, or the path of a case.yaml")
    from qcdoctor.collectors.files import CaseFiles
    if not CaseFiles(folder, tuple(map(Path, allow_outside))).inside(file):
        raise QcdoctorError(f"refused: {file.name} is a symlink leading out of the case folder; "
                            "it is not read", file=str(file),
                            fix="replace the link with a copy of the file it points to")
    return folder, file


def load_case(path: str | Path, allow_outside: tuple = ()) -> Case:
    folder, file = resolve_case_path(path, allow_outside)
    try:
        size = file.stat().st_size
        if size > limits.CASE_FILE_BYTES:
            # refused before reading: a huge file costs nothing
            raise QcdoctorError(f"{size:,} bytes: larger than the "
                                f"{limits.size_text(limits.CASE_FILE_BYTES)} limit for {CASE_FILE}",
                                file=str(file), fix="keep only the keys qcdoctor reads; attach "
                                                    "data (tables, logs) as separate files")
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise QcdoctorError(f"not UTF-8 text (byte {exc.start})", file=str(file),
                            fix="save the file as UTF-8") from None
    except OSError as exc:
        raise QcdoctorError(f"cannot read: {exc.strerror}", file=str(file)) from None
    return parse_case(text, file, folder)


def parse_case(text: str, file: Path | None, folder: Path | None) -> Case:
    shown = str(file) if file else CASE_FILE
    data, lines = load_document(text, shown, CASE_SCHEMA)
    case = Case(folder=folder, file=file, data=data, lines=lines)
    _check_consistency(case, shown)
    return case


# the chips each march runs on: a march implies its chip family (knowledge.md §15)
MARCH_CHIPS = {"nash-e": {"J6E", "S100"}, "nash-m": {"J6M", "S100P"}, "nash-p": {"J6P", "S600"},
               "nash-h": {"J6H"}, "nash-b": {"J6B"}, "nash-b-lite": {"J6B"},
               "nash-b-plus": {"J6B"}}


def _check_consistency(case: Case, shown: str) -> None:
    platform = case.get("platform", {})
    chip, march = platform.get("chip"), platform.get("march")
    if chip and march and march in MARCH_CHIPS and chip not in MARCH_CHIPS[march]:
        raise QcdoctorError(f"chip {chip} does not run march {march}", file=shown,
                            line=case.lines.get("platform.march"), key="platform",
                            fix=f"{march} is {'/'.join(sorted(MARCH_CHIPS[march]))}; "
                                "correct one of the two or drop the one you are unsure of")
    _check_numbering(case, shown)
    for i, run in enumerate(case.get("analyses_run", [])):
        for need in ("baseline", "analysis"):
            if need not in run:
                raise QcdoctorError(f"this analyses_run entry has no '{need}'", file=shown,
                                    line=case.lines.get("analyses_run"),
                                    key=f"analyses_run[{i}]",
                                    fix="name the two stages compared, e.g. "
                                        "{type: convert, baseline: qat_bc, analysis: quantized_bc}")


def _check_numbering(case: Case, shown: str) -> None:
    """Levels 3 and 4 exist only in the old numbering: refuse them where the case says new."""
    if case.get("consistency_numbering") != "new":
        return
    for key in ("consistency_level", "consistency_levels_tried"):
        value = case.get(key)
        values = value if isinstance(value, list) else [value]
        high = [v for v in values if v is not None and v > 2]
        if high:
            raise QcdoctorError(f"level {high[0]} exists only in the old numbering (0-4), but "
                                "consistency_numbering is new (0-2)", file=shown,
                                line=case.lines.get(key), key=key,
                                fix="write the level in the new numbering (old 4 = new 2, old 2 = "
                                    "new 1) or set consistency_numbering: old")
