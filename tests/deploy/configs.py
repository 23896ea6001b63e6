"""hb_compile / hb_mapper configs as the tools write them, and cases around them."""

from __future__ import annotations

from pathlib import Path

import yaml

MEAN = "123.675 116.28 103.53"
SCALE = "0.01712475 0.017507 0.01742919"          # 1/std printed with 6-8 digits


def hb_compile(march="nash-e", norm_type="data_mean_and_scale", mean=MEAN, scale=SCALE,
               type_train="rgb", extra_model="", extra_input="", calibration="") -> str:
    """An hb_compile config in the model-zoo layout (quoted strings and all)."""
    return f"""\
model_parameters:
  onnx_model: './yolov8n.onnx'
  march: "{march}"
  working_dir: './model_output'
  output_model_file_prefix: 'yolov8n_640x640_nv12'
{extra_model}input_parameters:
  input_name: ""
  input_type_rt: 'nv12'
  input_type_train: '{type_train}'
  input_layout_train: 'NCHW;'
  norm_type: '{norm_type}'
  mean_value: {mean}
  scale_value: {scale}
{extra_input}calibration_parameters:
  cal_data_dir: './calibration_data_rgb_f32'
  cal_data_type: 'float32'
{calibration}compiler_parameters:
  compile_mode: 'latency'
  optimize_level: 'O2'
  core_num: 1
"""


def write_case(root: Path, config: str | None, *, train: dict, name_config=True,
               config_name="deploy/hb_compile.yaml", script: str | None = None,
               script_name="deploy/compile_model.py", **deploy) -> Path:
    """A compile-stage case with the config (and a script) in deploy/; case.yaml names
    them only with ``name_config``."""
    (root / "deploy").mkdir(parents=True, exist_ok=True)
    section = {"train": train, "postprocess_same": True, **deploy}
    if config is not None:
        (root / config_name).write_text(config, encoding="utf-8")
        if name_config:
            section["config"] = config_name
    if script is not None:
        (root / script_name).write_text(script, encoding="utf-8")
        if name_config:
            section["script"] = script_name
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"],
            "stages": {"quantized_bc": {"status": "normal"}, "hbm_x86": {"status": "abnormal"},
                       "board": {"status": "abnormal"}},
            "deploy": section}
    (root / "case.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return root
