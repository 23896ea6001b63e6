"""What ``qcdoctor probe`` loads: the two models from MOD:ATTR factories, the inputs from
a .pt file.

MOD:ATTR imports the user's module (code runs, as pytest runs test files): an explicit,
documented choice of the probe command. The working directory is importable, as with
``python -m``. Inputs load with ``weights_only=True``: tensors and plain containers only.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from qcdoctor.errors import QcdoctorError


def load_model(spec: str, option: str):
    """The nn.Module MOD:ATTR names: the attribute itself, or what calling it returns."""
    from torch import nn
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise QcdoctorError(f"{spec!r} is not MOD:ATTR", key=option,
                            fix="name a module and a factory in it, e.g. "
                                "my_models:build_float (a function returning the model)")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise QcdoctorError(f"cannot import {module_name} ({exc})", key=option,
                            fix="run from the folder that holds it, or put it on PYTHONPATH") from None
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise QcdoctorError(f"{module_name} has no {attr}", key=option,
                                fix=f"check the name after ':' in {spec}")
        target = getattr(target, part)
    if callable(target) and not isinstance(target, nn.Module):
        target = target()
    if not isinstance(target, nn.Module):
        raise QcdoctorError(f"{spec} gives a {type(target).__name__}, not a torch nn.Module",
                            key=option, fix="name a model or a function returning one")
    return target


def load_inputs(path: Path):
    """A tensor, a tuple/list of positional arguments or a dict of keyword arguments."""
    import torch
    if not path.is_file():
        raise QcdoctorError("file not found", file=str(path),
                            fix="save the inputs with torch.save(tensor_or_tuple, path)")
    try:
        inputs = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for bad files
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise QcdoctorError(f"cannot load the inputs ({first})", file=str(path),
                            fix="save only tensors, in a tuple, list or dict, with torch.save") from None
    if not isinstance(inputs, (torch.Tensor, tuple, list, dict)):
        raise QcdoctorError(f"holds a {type(inputs).__name__}", file=str(path),
                            fix="save a tensor, or a tuple/list/dict of the forward's arguments")
    return inputs
