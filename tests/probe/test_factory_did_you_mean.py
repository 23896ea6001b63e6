"""A MOD:ATTR naming no attribute of the module: one clear error naming the module's file,
the nearest public name and the option to write, or what the module defines."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from qcdoctor.engine.commands.cli import main  # noqa: E402
from qcdoctor.errors import QcdoctorError  # noqa: E402
from qcdoctor.probe.loading import load_model  # noqa: E402

MODELS_PY = '''
import torch
from torch import nn


def build_float():
    return nn.Linear(4, 2)


def build_qat():
    return nn.Linear(4, 2)


class factories:
    @staticmethod
    def build():
        return nn.Linear(4, 2)
'''


def _module(tmp_path, monkeypatch, name: str) -> None:
    """``name``.py in the working directory, which the probe puts on sys.path (a name per
    test: a module is imported once)."""
    (tmp_path / f"{name}.py").write_text(MODELS_PY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)


def test_a_typo_of_a_factory_names_the_one_meant_and_the_option_to_write(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "dym_models_typo")
    with pytest.raises(QcdoctorError) as error:
        load_model("dym_models_typo:build_flaot", "--baseline")
    assert error.value.problem == "dym_models_typo has no build_flaot (did you mean 'build_float'?)"
    assert error.value.fix == "write --baseline dym_models_typo:build_float"
    assert error.value.file == "dym_models_typo.py" and error.value.key == "--baseline"


def test_a_typo_inside_a_dotted_name_is_fixed_in_place(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "dym_models_dotted")
    with pytest.raises(QcdoctorError) as error:
        load_model("dym_models_dotted:factories.biuld", "--analysis")
    assert error.value.problem == ("dym_models_dotted.factories has no biuld "
                                   "(did you mean 'build'?)")
    assert error.value.fix == "write --analysis dym_models_dotted:factories.build"


def test_a_name_near_nothing_lists_what_the_module_defines(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "dym_models_far")
    with pytest.raises(QcdoctorError) as error:
        load_model("dym_models_far:xyz", "--baseline")
    assert "did you mean" not in error.value.problem
    # the imported modules (torch, nn) are no names to write
    assert error.value.fix == ("name one of what dym_models_far defines after ':': "
                               "build_float, build_qat, factories")


def test_the_cli_says_it_in_one_message_with_exit_2(tmp_path, monkeypatch, capsys):
    _module(tmp_path, monkeypatch, "dym_models_cli")
    torch.save(torch.randn(2, 4), tmp_path / "in.pt")
    code = main(["probe", "--baseline", "dym_models_cli:build_flaot", "--analysis",
                 "dym_models_cli:build_qat", "--inputs", "in.pt", "--out", "out"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "qcdoctor: error: dym_models_cli.py: '--baseline': dym_models_cli has no " \
           "build_flaot (did you mean 'build_float'?)" in err
    assert "fix: write --baseline dym_models_cli:build_float" in err
    assert not (tmp_path / "out").exists()
