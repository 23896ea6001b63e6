"""Realistic compile scripts for the tests: one correct, then each mistake."""

from pathlib import Path

# The bundled example's script carries one mistake (a BGR conversion for an RGB-trained
# model); with it corrected it is the correct script every other mistake starts from.
EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "board_nv12_deploy" / "deploy"
           / "compile_model.py").read_text(encoding="utf-8")
CORRECT = EXAMPLE.replace('mode="yuvbt601full2bgr"', 'mode="yuvbt601full2rgb"')
assert CORRECT != EXAMPLE


def _mistake(old: str, new: str) -> str:
    script = CORRECT.replace(old, new)
    assert script != CORRECT, f"the mistake was not applied: {old!r}"
    return script


MISTAKES = {
    # BGR conversion for an RGB-trained model (the bundled example's mistake)
    "wrong_mode": EXAMPLE,
    # the inserts come after convert
    "insert_after_convert": _mistake(
        "    add_camera_input(qat_bc.functions[0])\n    quantized = hb_convert(qat_bc, MARCH)\n",
        "    quantized = hb_convert(qat_bc, MARCH)\n    add_camera_input(quantized.functions[0])\n"),
    # Quantize/Dequantize removed from qat.bc, before convert
    "qdq_before_convert": _mistake(
        "    quantized = hb_convert(qat_bc, MARCH)\n"
        "    quantized.functions[0].remove_io_op(op_types=[\"Dequantize\"])\n",
        "    qat_bc.functions[0].remove_io_op(op_types=[\"Dequantize\"])\n"
        "    quantized = hb_convert(qat_bc, MARCH)\n"),
    # compile for another march than convert
    "march_mismatch": _mistake('hbc.compile(quantized, "model.hbm", march=MARCH',
                               'hbc.compile(quantized, "model.hbm", march="nash-m"'),
    # NCHW-trained model fed NHWC pyramid input without a transpose
    "missing_transpose": _mistake(
        "        node = inp.insert_transpose(permutes=[0, 3, 1, 2])\n"
        "        node = node.insert_image_preprocess(",
        "        node = inp.insert_image_preprocess("),
    # Horizon's example normalisation instead of the model's own
    "mean_std_mismatch": _mistake("MEAN = [123.675, 116.28, 103.53]\nSTD = [58.395, 57.12, 57.375]",
                                  "MEAN = [128.0] * 3\nSTD = [128.0] * 3"),
}

# a value only known at run time: never guessed
DYNAMIC_MODE = _mistake('mode="yuvbt601full2rgb"', "mode=args_mode()")
