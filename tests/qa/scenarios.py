"""Case folders with QuantAnalysis outputs for each reading the rules must make."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.qa.writers import layer, write_advisor, write_badcase, write_compare, write_sensitivity

LUT = "horizon_plugin_pytorch.nn.qat.segment_lut.SegmentLUT"
CONV = "horizon_plugin_pytorch.nn.qat.conv2d.Conv2d"
HBIR_CONV = "hbir.conv2d [hbir.conv2d]"


def case_yaml(folder: Path, **extra) -> None:
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "badcase": "available",
            "stages": {"qat_bc": {"status": "normal"}, "quantized_bc": {"status": "abnormal"}},
            **extra}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def sens_rows(values: list[tuple[str, float]], op_type=CONV, kind="activation"):
    return [(name, kind, LUT if any(w in name for w in ("rsqrt", "exp", "reciprocal")) else op_type, v, "qint8")
            for name, v in values]


def cliff_rows():
    rows = [layer(f"backbone.s{i}.conv", 0.99995 - i * 1e-6) for i in range(6)]
    rows.append(layer("neck.fuse.conv", None))                       # fused: blank metrics
    rows.append(layer("neck.fuse.relu", 0.8102, base=(-1.0, 1.0), analy=(-0.99, 0.99)))
    rows += [layer(f"head.cls.{i}", 0.80 - i * 0.004) for i in range(5)]
    return rows


def gradual_rows():
    return [layer(f"decoder.layer{i}.linear", 0.9999 - i * 0.0025) for i in range(12)]


def declining_rows():
    """Cosine falling steadily from 1.0 to 0.996, a few quantization steps a row: eleven
    rows below the 0.999 a report cites (knowledge.md R5.6: accumulation, not noise)."""
    return [layer(f"block{i}.linear", 1.0 - 0.004 * i / 19, atol=0.001 * (1 + i / 10),
                  qscale=0.01) for i in range(20)]


def truncation_rows():
    rows = [layer(f"pre.{i}", 0.99996) for i in range(4)]
    rows.append(layer("head.reciprocal", 0.62, dtype="qint8", qscale=0.05, base=(-130.0, 130.0),
                      analy=(-6.35, 6.35), analy_op=LUT))
    rows += [layer(f"post.{i}", 0.60 - i * 0.01) for i in range(3)]
    return rows


def rounding_rows():
    # rounding: the error is about one quantization step (Atol 1.2 x qscale), the range kept
    rows = [layer(f"pre.{i}", 0.99996) for i in range(4)]
    rows.append(layer("head.bbox.conv", 0.93, dtype="qint8", qscale=0.0079, base=(-1.0, 1.0),
                      analy=(-0.995, 1.0), atol=0.0095))
    rows += [layer(f"post.{i}", 0.925 - i * 0.002) for i in range(3)]
    return rows


def build(kind: str, root: Path, layout: str = "16", fmt: str = "txt") -> Path:
    """A case folder for one scenario; returns the case folder."""
    case = root / kind
    qa = case / "qa_convert"
    run = [{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
            "out_dir": "qa_convert", "sensitivity": True}]
    case_yaml(case, analyses_run=run)
    if kind == "cliff":
        write_compare(qa, cliff_rows(), layout, fmt)
        write_sensitivity(qa, sens_rows([("neck.fuse.relu", 0.42), ("head.cls.0", 0.05),
                                         ("backbone.s1.conv", 0.03), ("head.cls.1", 0.01),
                                         ("backbone.s2.conv", 0.004), ("backbone.s0.conv", 0.0)]))
    elif kind == "gradual":
        write_compare(qa, gradual_rows(), layout, fmt)
        write_sensitivity(qa, sens_rows([(f"decoder.layer{i}.linear", 0.05 - i * 0.001)
                                         for i in range(12)] + [("tail.a", 0.0), ("tail.b", 0.0),
                                                                ("tail.c", 0.0)]))
    elif kind == "truncation":
        write_compare(qa, truncation_rows(), layout, fmt)
        write_sensitivity(qa, sens_rows([("head.reciprocal", 0.8), ("pre.1", 0.01),
                                         ("pre.2", 0.005), ("pre.3", 0.0), ("post.1", 0.0)]))
        write_advisor(qa, [("head.reciprocal", "Reciprocal",
                            "Total data range 130925.09375 maybe too large for quantization.",
                            "limit the data range")])
    elif kind == "rounding":
        write_compare(qa, rounding_rows(), layout, fmt)
        write_sensitivity(qa, sens_rows([("head.bbox.conv", 0.3), ("pre.1", 0.02),
                                         ("pre.2", 0.01), ("pre.3", 0.0), ("post.1", 0.0)]))
    elif kind == "lut":
        write_compare(qa, cliff_rows(), layout, fmt)
        write_sensitivity(qa, sens_rows([("attn.rsqrt", 0.6), ("pos.exp", 0.4), ("conv1", 0.02),
                                         ("conv2", 0.01), ("conv3", 0.0), ("conv4", 0.0)]))
    elif kind == "flat":
        write_compare(qa, gradual_rows(), layout, fmt)
        write_sensitivity(qa, sens_rows([(f"block{i}.conv", 0.1 - i * 0.003) for i in range(8)]
                                        + [("z1", 0.0), ("z2", 0.0)]))
    elif kind == "broken_run":
        write_compare(qa, cliff_rows(), layout, fmt)
        write_sensitivity(qa, sens_rows([(f"op{i}", 0.5 - i * 0.02) for i in range(10)]))
        write_badcase(qa, {"L1": {"pred_boxes": 3, "pred_logits": 17}})
    else:
        raise ValueError(kind)
    return case


SCENARIOS = ("cliff", "gradual", "truncation", "rounding", "lut", "flat", "broken_run")
