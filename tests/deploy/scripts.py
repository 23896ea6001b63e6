"""Realistic compile scripts, written for the tests: one correct, then each mistake."""

CORRECT = '''\
"""Compile the detection model for J6E with NV12 camera input."""
import argparse

from hbdk4.compiler import load, convert as hb_convert
import hbdk4.compiler as hbc

MARCH = "nash-e"
MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def add_camera_input(func):
    # pyramid inputs are NHWC NV12; iterate in reverse so indices stay valid
    for inp in reversed(func.inputs):
        node = inp.insert_transpose(permutes=[0, 3, 1, 2])
        node = node.insert_image_preprocess(mode="yuvbt601full2rgb", divisor=1,
                                            mean=MEAN, std=STD)
        node.insert_image_convert("nv12")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bc", default="qat.bc")
    args = parser.parse_args()
    qat_bc = load(args.bc)
    add_camera_input(qat_bc.functions[0])
    quantized = hb_convert(qat_bc, MARCH)
    quantized.functions[0].remove_io_op(op_types=["Dequantize"])
    hbc.compile(quantized, "model.hbm", march=MARCH, opt=2, jobs=8, core_num=1)


if __name__ == "__main__":
    main()
'''

MISTAKES = {
    # BGR conversion for an RGB-trained model
    "wrong_mode": CORRECT.replace('mode="yuvbt601full2rgb"', 'mode="yuvbt601full2bgr"'),
    # the inserts come after convert
    "insert_after_convert": CORRECT.replace(
        "    add_camera_input(qat_bc.functions[0])\n    quantized = hb_convert(qat_bc, MARCH)\n",
        "    quantized = hb_convert(qat_bc, MARCH)\n    add_camera_input(quantized.functions[0])\n"),
    # Quantize/Dequantize removed from qat.bc, before convert
    "qdq_before_convert": CORRECT.replace(
        "    quantized = hb_convert(qat_bc, MARCH)\n"
        "    quantized.functions[0].remove_io_op(op_types=[\"Dequantize\"])\n",
        "    qat_bc.functions[0].remove_io_op(op_types=[\"Dequantize\"])\n"
        "    quantized = hb_convert(qat_bc, MARCH)\n"),
    # compile for another march than convert
    "march_mismatch": CORRECT.replace('hbc.compile(quantized, "model.hbm", march=MARCH',
                                      'hbc.compile(quantized, "model.hbm", march="nash-m"'),
    # NCHW-trained model fed NHWC pyramid input without a transpose
    "missing_transpose": CORRECT.replace(
        "        node = inp.insert_transpose(permutes=[0, 3, 1, 2])\n"
        "        node = node.insert_image_preprocess(",
        "        node = inp.insert_image_preprocess("),
    # Horizon's example normalisation instead of the model's own
    "mean_std_mismatch": CORRECT.replace("MEAN = [123.675, 116.28, 103.53]", "MEAN = [128.0] * 3")
                                .replace("STD = [58.395, 57.12, 57.375]", "STD = [128.0] * 3"),
}

# a value only known at run time: never guessed
DYNAMIC_MODE = CORRECT.replace('mode="yuvbt601full2rgb"', "mode=args_mode()")
