"""Compile the lane model for J6E with NV12 camera input (pyramid)."""
import argparse

import hbdk4.compiler as hbc
from hbdk4.compiler import convert as hb_convert
from hbdk4.compiler import load

MARCH = "nash-e"
MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def add_camera_input(func):
    # pyramid inputs are NHWC NV12; iterate in reverse so indices stay valid
    for inp in reversed(func.inputs):
        node = inp.insert_transpose(permutes=[0, 3, 1, 2])
        node = node.insert_image_preprocess(mode="yuvbt601full2bgr", divisor=1,
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
