"""Deployment answers the case's own files already give, so the intake asks only the rest.

The compile script is found in the case folder when none is named, then read statically
(collectors/deploy_script.py) with the hb_compile YAML named as deploy.config. Each answer
carries where it was read, written beside the value in case.yaml. Only what the files
state is taken: the training normalisation is never filled in from the script's
insert_image_preprocess (the normalisation check compares exactly those two), only
offered as a default to confirm; so is the chip of the march the scripts compile for.
"""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors.deploy_discovery import (
    CONFIG_NAME_WORDS,
    chosen,
    find_compile_configs,
    find_compile_scripts,
    parsed,
    script_calls,
)
from qcdoctor.collectors.deploy_facts import DeployFiles, stated_march
from qcdoctor.collectors.deploy_script import UNKNOWN
from qcdoctor.collectors.files import ArtifactRefused, CaseFiles
from qcdoctor.collectors.hb_compile_yaml import read_hb_compile
from qcdoctor.engine.intake.questions import question_for_key
from qcdoctor.errors import QcdoctorError


def _choices(key: str) -> tuple:
    """The answers the intake's question for ``key`` takes (rules/questions.yaml)."""
    return question_for_key(key).choices


def known_answers(folder: Path, deploy: dict, files: CaseFiles) -> dict[str, tuple[object, str]]:
    """{question key: (value, where it was read)} from deploy.script and deploy.config."""
    known: dict[str, tuple[object, str]] = {}
    config_name = deploy.get("config") or chosen(find_compile_configs(folder, files),
                                                 CONFIG_NAME_WORDS)
    config = None
    if config_name:
        try:
            config = parsed(read_hb_compile, files.check(folder / config_name, "config"))
        except (ArtifactRefused, QcdoctorError):
            config = None
    row = (config or {}).get("inputs", [{}])[0] if config and config.get("inputs") else {}
    for key, field in (("deploy.train.color", "input_type_train"),
                       ("deploy.board.color", "input_type_rt"),
                       ("deploy.board.input_source", "input_source"),
                       ("deploy.train.layout", "input_layout_train")):
        value = str(row.get(field) or "")
        value = value.upper() if key.endswith("layout") else value.lower()
        if value in _choices(key):
            known[key] = (value, f"{config_name}: {field}")
    script = deploy.get("script")
    calls = script_calls(files, folder / script) if script else None
    for call in calls or ():
        mode = call.args.get("mode")
        if call.name == "insert_image_convert" and isinstance(mode, str) \
                and mode.lower() in _choices("deploy.board.color"):
            known.setdefault("deploy.board.color", (mode.lower(), f"{script}:{call.line} {call.name}"))
    transpose = next((c for c in calls or () if c.name == "insert_transpose"), None)
    if transpose is not None and known.get("deploy.board.color", ("",))[0] in ("nv12", "gray"):
        # an image input is NHWC; a transpose inserted in front of the model means the
        # model (trained) takes NCHW. Whether its permutes are right is checked later.
        known.setdefault("deploy.train.layout",
                         ("NCHW", f"{script}:{transpose.line} {transpose.name}"))
    return known


def script_march(folder: Path, deploy: dict, files: CaseFiles) -> tuple[str, str] | None:
    """(march, where it was read) the compile script states in its convert / compile calls,
    read as the collectors read it (``stated_march``): deploy.script, else the compile
    scripts found in the folder; None unless they name one march between them."""
    names = [deploy["script"]] if deploy.get("script") else find_compile_scripts(folder, files)
    stated = set()
    for name in names:
        calls = script_calls(files, folder / name)
        found = stated_march(DeployFiles(calls=calls, script_source=name)) if calls else None
        if found:
            stated.add(found[:2])
    if len({march for march, _ in stated}) != 1:
        return None
    return min(stated)                  # the same march: the first script that states it


def script_normalisation(folder: Path, deploy: dict, files: CaseFiles) -> dict[str, list]:
    """mean / std the compile script's insert_image_preprocess uses (defaults to confirm)."""
    script = deploy.get("script")
    calls = script_calls(files, folder / script) if script else None
    found = [c for c in calls or () if c.name == "insert_image_preprocess"]
    if not found:
        return {}
    out = {}
    for name in ("mean", "std"):
        value = found[-1].args.get(name, UNKNOWN)
        value = value if isinstance(value, (list, tuple)) else [value]
        if len(value) in (1, 3) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                        for v in value):
            out[name] = [float(v) for v in value]
    return out
