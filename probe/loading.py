"""What ``qcdoctor probe`` loads: the two models from MOD:ATTR factories, the inputs from
a .pt file.

MOD:ATTR imports the user's module (code runs, as pytest runs test files): an explicit,
documented choice of the probe command. The working directory is importable, as with
``python -m``. Inputs load with ``weights_only=True``: tensors and plain containers only.
A module or factory that raises is one clear error naming the file, the line in it and
what was raised (``QCDOCTOR_DEBUG=1`` prints the traceback as well).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from qcdoctor.errors import QcdoctorError
from qcdoctor.suggest import did_you_mean, nearest

_SEE_TRACEBACK = "QCDOCTOR_DEBUG=1 prints the traceback"


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
    module = _imported(module_name, option)
    target = module
    parts = attr.split(".")
    for depth, part in enumerate(parts):
        if not hasattr(target, part):
            raise _no_such_name(module, module_name, parts, depth, target, option)
        target = getattr(target, part)
    if callable(target) and not isinstance(target, nn.Module):
        target = _called(target, spec, module, option)
    if not isinstance(target, nn.Module):
        raise QcdoctorError(f"{spec} gives a {type(target).__name__}, not a torch nn.Module",
                            key=option, fix="name a model or a function returning one")
    return target


def _no_such_name(module, module_name: str, parts: list[str], depth: int, owner,
                  option: str) -> QcdoctorError:
    """The error for ``parts[depth]`` missing from ``owner``: the module's file, the
    nearest public name (a typo of a factory) as the MOD:ATTR to write, else what is there."""
    missing, owner_name = parts[depth], ".".join([module_name, *parts[:depth]])
    names = _public_names(owner)
    near = nearest(missing, names)
    problem = f"{owner_name} has no {missing}"
    if near is not None:
        fixed = ".".join([*parts[:depth], near, *parts[depth + 1:]])
        problem += did_you_mean(missing, [near])
        fix = f"write {option} {module_name}:{fixed}"
    elif names:
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        fix = f"name one of what {owner_name} defines after ':': {shown}"
    else:
        fix = f"{owner_name} defines no public name: define the model or its factory there"
    source = getattr(module, "__file__", None)
    return QcdoctorError(problem, file=_shown_path(source) if source else None, key=option,
                         fix=fix)


def _public_names(owner) -> list[str]:
    """The names a MOD:ATTR can take from ``owner``: its public attributes, the modules it
    imported (torch, nn) left out."""
    import types

    def imported_module(name: str) -> bool:
        try:
            return isinstance(getattr(owner, name), types.ModuleType)
        except Exception:  # noqa: BLE001 - a property of the user's that raises: a name still
            return False
    return [name for name in dir(owner) if not name.startswith("_") and not imported_module(name)]


def _imported(module_name: str, option: str):
    """The user's module, imported; one clear error when it is not found or its code
    raises."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise QcdoctorError(f"cannot import {module_name} ({exc})", key=option,
                                fix="run from the folder that holds it, or put it on "
                                    "PYTHONPATH") from None
        raised = exc                    # found, but it imports something missing
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the user's code raises
        if isinstance(exc, SystemExit) and type(exc) is not SystemExit:
            raise                       # a stop signal (SIGTERM) on its way out
        raised = exc
    source = _source_of(module_name)
    raise QcdoctorError(f"importing {module_name} fails: {_what(raised)}",
                        file=_where(raised, source), line=_line(raised, source), key=option,
                        fix=f"fix the error in {module_name} (python -c 'import "
                            f"{module_name}' shows it; {_SEE_TRACEBACK})") from raised


def _called(factory, spec: str, module, option: str):
    """What the factory returns; one clear error naming it when it raises."""
    try:
        return factory()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the user's code raises
        if isinstance(exc, SystemExit) and type(exc) is not SystemExit:
            raise
        source = getattr(module, "__file__", None)
        raise QcdoctorError(f"{spec} raised {_what(exc)}", file=_where(exc, source),
                            line=_line(exc, source), key=option,
                            fix=f"make {spec.partition(':')[2]}() return the model when called "
                                f"without arguments ({_SEE_TRACEBACK})") from exc


def _what(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


def _source_of(module_name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module_name)
    except (Exception, SystemExit):  # noqa: BLE001 - a parent package that fails again
        return None
    return spec.origin if spec is not None and spec.has_location else None


def _line(exc: BaseException, source: str | None) -> int | None:
    """The line of ``source`` the exception came through last (a syntax error's own)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return exc.lineno
    found = None
    frame = exc.__traceback__
    while frame is not None:
        if source and _same_path(frame.tb_frame.f_code.co_filename, source):
            found = frame.tb_lineno
        frame = frame.tb_next
    return found


def _where(exc: BaseException, source: str | None) -> str | None:
    path = exc.filename if isinstance(exc, SyntaxError) and exc.filename else source
    return _shown_path(path) if path else None


def _shown_path(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _same_path(a: str, b: str) -> bool:
    return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def load_inputs(path: Path):
    """A tensor, a tuple/list of positional arguments or a dict of keyword arguments, its
    values finite."""
    from qcdoctor.probe.compare import check_finite_inputs
    if not path.is_file():
        raise QcdoctorError("file not found", file=str(path),
                            fix="save the inputs with torch.save(tensor_or_tuple, path)")
    inputs = _loaded(path, "the inputs")
    check_finite_inputs(inputs, file=str(path))
    return inputs


def load_samples(path: Path):
    """``--samples``: a file holding a list (or tuple) of samples, each one forward call's
    inputs, or a folder of sample files (``*.pt``, one sample each, in name order: loaded
    one at a time, as the search reaches them). Both load as ``--inputs`` does."""
    from qcdoctor.probe.samples import Samples
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".pt" and p.is_file())
        if not files:
            raise QcdoctorError("holds no sample files (*.pt)", file=str(path),
                                fix="save each sample with torch.save(sample, "
                                    "folder / f'{index:05d}.pt')")
        return Samples(SampleFiles(files))
    if not path.is_file():
        raise QcdoctorError("file or folder not found", file=str(path),
                            fix="give a file holding a list of samples (torch.save(list_of_"
                                "samples, path)) or a folder of sample files")
    samples = _loaded(path, "the samples")
    if not isinstance(samples, (list, tuple)):
        raise QcdoctorError(f"holds a {type(samples).__name__}, not a list of samples",
                            file=str(path),
                            fix="save a list of samples (each a tensor, a tuple of arguments "
                                "or a dict), or give one call's inputs with --inputs")
    return Samples(samples)


class SampleFiles:
    """Sample files loaded one at a time, in order, each pass again: the samples need
    not fit in memory together."""

    def __init__(self, files: list[Path]):
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self):
        for path in self.files:
            yield _loaded(path, "the sample")


def _loaded(path: Path, what: str):
    """``torch.load`` with ``weights_only=True``: tensors in tuples, lists and dicts."""
    import torch
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for bad files
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise QcdoctorError(f"cannot load {what} ({first})", file=str(path),
                            fix="save only tensors, in a tuple, list or dict, with "
                                "torch.save") from None
    if not isinstance(value, (torch.Tensor, tuple, list, dict)):
        raise QcdoctorError(f"holds a {type(value).__name__}", file=str(path),
                            fix="save a tensor, or a tuple/list/dict of the forward's arguments")
    return value
