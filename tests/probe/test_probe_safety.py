"""The probe never damages what it did not write, and the user's own mistakes are one clear
error: a probe_run.yaml listing files outside its folder, output names that are no file
names, factories that raise, devices torch cannot use, models with different numbers of
outputs, NaN inputs, and a Ctrl-C at any point while the caller's models are changed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import yaml  # noqa: E402
from torch import nn  # noqa: E402
from torch.ao.quantization import FakeQuantizeBase  # noqa: E402

from qcdoctor.collectors.reading.compare_layers import load_compare  # noqa: E402
from qcdoctor.engine.commands.cli import main  # noqa: E402
from qcdoctor.errors import QcdoctorError  # noqa: E402
from qcdoctor.probe import ProbeWarning, compare_models  # noqa: E402
from qcdoctor.probe import compare as probe_compare  # noqa: E402
from qcdoctor.probe.stats import pair_stats  # noqa: E402
from tests.paths import REPO  # noqa: E402
from tests.probe.test_probe import Net  # noqa: E402 - conv, relu, pool, linear: two outputs
from tests.probe_nets import eager_qat  # noqa: E402

EXAMPLE = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(2))


def models():
    torch.manual_seed(0)
    base = Net().eval()
    return base, eager_qat(base)


def tree(folder: Path) -> dict:
    """Every entry under ``folder``, links not followed: its kind and its bytes."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink():
                found[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                found[str(path)] = ("dir", None)
            else:
                found[str(path)] = ("file", path.read_bytes())
    return found


# -- a manifest lists only the probe's own files ------------------------------------------

def _folder_with_manifest(tmp_path: Path, entry_for) -> tuple[Path, Path]:
    """An earlier probe output ``out`` whose probe_run.yaml lists what ``entry_for(out,
    victim)`` gives, beside a file of the user's outside it (``victim``)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own", encoding="utf-8")
    (tmp_path / "victim_dir").mkdir()
    (tmp_path / "victim_dir" / "kept.txt").write_text("kept", encoding="utf-8")
    out = tmp_path / "qa_probe"
    base, qat = models()
    compare_models(base, qat, EXAMPLE, out, sensitivity=False)
    manifest = out / "probe_run.yaml"
    document = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    document["files"].append(entry_for(out, victim))
    manifest.write_text(yaml.safe_dump(document), encoding="utf-8")
    return out, victim


def _symlink_out(out: Path, victim: Path) -> str:
    (out / "compare_per_layer_out.csv").unlink()
    (out / "compare_per_layer_out.csv").symlink_to(victim)
    return "compare_per_layer_out.csv"


def _listed_folder(out: Path, victim: Path) -> str:
    (out / "fx_graph.txt").mkdir()
    (out / "fx_graph.txt" / "inside.txt").write_text("mine", encoding="utf-8")
    return "fx_graph.txt"


def _subfolder(out: Path, victim: Path) -> str:
    (out / "sub").mkdir()
    (out / "sub" / "notes.txt").write_text("mine", encoding="utf-8")
    return "sub/notes.txt"


def _foreign_name(out: Path, victim: Path) -> str:
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    return "notes.txt"


ENTRIES = {
    "absolute": (lambda out, victim: str(victim), "an absolute path"),
    "dot-dot": (lambda out, victim: "../victim.txt", "a path out of the folder"),
    "dot-dot folder": (lambda out, victim: "../victim_dir", "a path out of the folder"),
    "absolute folder": (lambda out, victim: str(victim.parent / "victim_dir"),
                        "an absolute path"),
    "symlink out": (_symlink_out, "a symbolic link"),
    "listed folder": (_listed_folder, "a folder"),
    "subfolder": (_subfolder, "a path into a subfolder"),
    "foreign name": (_foreign_name, "a name qcdoctor probe never writes"),
    "not a text": (lambda out, victim: 42, "not a file name"),
}


@pytest.mark.parametrize("case", sorted(ENTRIES))
def test_a_manifest_entry_outside_the_probes_files_is_refused_before_anything_changes(
        tmp_path, case):
    entry_for, why = ENTRIES[case]
    out, victim = _folder_with_manifest(tmp_path, entry_for)
    before = tree(tmp_path)
    base, qat = models()
    with pytest.raises(QcdoctorError) as error:
        compare_models(base, qat, EXAMPLE, out, names=["a", "b"])
    assert tree(tmp_path) == before                 # nothing written, nothing removed
    assert victim.read_text(encoding="utf-8") == "the user's own"
    message = str(error.value)
    assert error.value.file == str(out / "probe_run.yaml") and error.value.key == "files"
    assert why in message and "remove the entry" in message


def test_the_cli_refuses_a_manifest_reaching_outside_with_exit_2(tmp_path, monkeypatch, capsys):
    out, victim = _folder_with_manifest(tmp_path, lambda out, victim: str(victim))
    _cli_files(tmp_path, monkeypatch, "safety_models_manifest")
    before = tree(tmp_path)
    # refused before the models are loaded (the analysis factory would raise)
    code = main(["probe", "--baseline", "safety_models_manifest:build", "--analysis",
                 "safety_models_manifest:explode", "--inputs", "in.pt", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "internal error" not in err
    assert "boom" not in err
    # the entry by its name (a long temporary folder may be cut from the middle of it)
    assert "probe_run.yaml" in err and victim.name in err and "fix:" in err
    assert tree(tmp_path) == before


def test_a_hard_link_in_the_folder_is_replaced_not_written_through(tmp_path):
    """A listed regular file that is a hard link to the user's file elsewhere: the rerun
    puts a new file at its name; the user's file keeps its bytes."""
    base, qat = models()
    out = tmp_path / "p"
    compare_models(base, qat, EXAMPLE, out, names=["a", "b"])
    victim = tmp_path / "victim.csv"
    victim.write_text("the user's own", encoding="utf-8")
    for name in ("compare_per_layer_out.csv", "output_a_L1_sensitive_ops.pt"):
        (out / name).unlink()
        os.link(victim, out / name)
    compare_models(base, qat, EXAMPLE, out, names=["a", "b"])
    assert victim.read_text(encoding="utf-8") == "the user's own"
    assert load_compare(out / "compare_per_layer_out.csv").frame["mod_name"].size == 6


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"),
                                     KeyboardInterrupt()])
def test_a_failure_while_writing_leaves_the_folder_as_it_was(tmp_path, monkeypatch, failure):
    base, qat = models()
    out = tmp_path / "p"
    compare_models(base, qat, EXAMPLE, out, names=["a", "b"])
    before = tree(out)
    real = probe_compare.write_sensitivity
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise failure
        return real(*args, **kwargs)
    monkeypatch.setattr(probe_compare, "write_sensitivity", failing)
    with pytest.raises((QcdoctorError, KeyboardInterrupt)) as error:
        compare_models(base, qat, EXAMPLE, out, names=["c", "d"])
    if isinstance(failure, OSError):
        assert error.value.file == str(out) and "No space left" in str(error.value)
    assert tree(out) == before                  # the earlier run whole, no temporary left
    monkeypatch.setattr(probe_compare, "write_sensitivity", real)
    compare_models(base, qat, EXAMPLE, out, names=["c", "d"])      # the rerun goes ahead
    assert (out / "output_c_L1_sensitive_ops.txt").is_file()
    assert not (out / "output_a_L1_sensitive_ops.txt").exists()


def test_a_failure_in_a_new_folder_leaves_no_folder(tmp_path, monkeypatch):
    base, qat = models()

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(probe_compare, "write_sensitivity", failing)
    with pytest.raises(QcdoctorError, match="No space left"):
        compare_models(base, qat, EXAMPLE, tmp_path / "p")
    assert not (tmp_path / "p").exists()


KILLED = textwrap.dedent('''
    import os, sys, torch
    sys.path.insert(0, sys.argv[2])
    from pathlib import Path
    from qcdoctor.probe import compare_models
    from tests.probe.test_probe_safety import EXAMPLE, models

    folder, results = Path(sys.argv[1]), []
    for k in range(1, 40):
        out = folder / f"run{k}"
        base, qat = models()
        compare_models(base, qat, EXAMPLE, out, names=["a", "b"])
        child = os.fork()
        if child == 0:                   # killed at its k-th replacement of a file
            real, count = os.replace, [0]

            def replace(*args):
                count[0] += 1
                if count[0] == k:
                    os._exit(9)
                return real(*args)
            os.replace = replace
            compare_models(base, qat, EXAMPLE, out, names=["c", "d"], metric="MSE")
            os._exit(0)
        _, status = os.waitpid(child, 0)
        compare_models(base, qat, EXAMPLE, out, names=["c", "d"], metric="MSE")
        names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
        assert not any("_a_" in n or "_L1_" in n for n in names), (k, names)
        assert (out / "output_d_MSE_sensitive_ops.pt").is_file(), (k, names)
        if os.waitstatus_to_exitcode(status) == 0:
            print("reached", k)
            break
''')


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_run_killed_while_replacing_files_leaves_a_folder_its_rerun_replaces(tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path), str(REPO)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "reached" in done.stdout


# -- output names name files --------------------------------------------------------------

@pytest.mark.parametrize("name, why", [("a/b", "path separator"), ("..", "names a folder"),
                                       ("", "is empty"), ("x\x00y", "control character"),
                                       ("n" * 300, "too long"), ("same", "given twice")])
def test_an_output_name_that_is_no_file_name_is_refused_before_any_work(tmp_path, name, why):
    base, qat = models()
    names = ["same", "same"] if name == "same" else [name, "b"]
    with pytest.raises(QcdoctorError, match=why) as error:
        compare_models(base, qat, EXAMPLE, tmp_path / "p", names=names)
    assert error.value.key == "names" and "one name per model output" in str(error.value)
    assert not (tmp_path / "p").exists()
    compare_models(base, qat, EXAMPLE, tmp_path / "p", names=["a", "b"])   # then it runs


def test_an_output_key_that_is_no_file_name_is_refused(tmp_path):
    class Keyed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return {"boxes/raw": self.fc(x), "scores": self.fc(x) * 2}
    torch.manual_seed(0)
    model = Keyed().eval()
    with pytest.raises(QcdoctorError, match="output key 'boxes/raw'") as error:
        compare_models(model, model, torch.randn(2, 4), tmp_path / "p")
    assert error.value.key == "names" and not (tmp_path / "p").exists()
    result = compare_models(model, model, torch.randn(2, 4), tmp_path / "p",
                            names=["boxes", "scores"])
    assert set(result.sensitivity) == {"boxes", "scores"}


def test_the_cli_refuses_a_name_with_a_slash_before_loading_the_models(
        tmp_path, monkeypatch, capsys):
    _cli_files(tmp_path, monkeypatch, "safety_models_names")
    code = main(["probe", "--baseline", "safety_models_names:explode", "--analysis",
                 "safety_models_names:build", "--inputs", "in.pt", "--out", "out",
                 "--names", "a/b"])
    err = capsys.readouterr().err
    assert code == 2 and "'--names'" in err and "'a/b'" in err and "Traceback" not in err
    assert "boom" not in err and not (tmp_path / "out").exists()


# -- the user's code and options ----------------------------------------------------------

MODELS_PY = '''
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()


def explode():
    raise RuntimeError("boom: weights file missing")


def needs_args(path):
    return build()
'''


def _cli_files(tmp_path: Path, monkeypatch, name: str) -> None:
    (tmp_path / f"{name}.py").write_text(MODELS_PY, encoding="utf-8")
    torch.save(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), tmp_path / "in.pt")
    monkeypatch.chdir(tmp_path)


def _probe(*options: str) -> list[str]:
    given = {"--analysis": None, "--inputs": "in.pt", "--out": "out"}
    given.update(dict(zip(options[::2], options[1::2], strict=True)))
    return ["probe", *[x for pair in given.items() for x in pair]]


@pytest.mark.parametrize("factory, shown", [
    ("explode", "RuntimeError: boom: weights file missing"),
    ("needs_args", "TypeError: needs_args() missing 1 required positional argument"),
])
def test_a_factory_that_raises_is_one_clear_error(tmp_path, monkeypatch, capsys, factory,
                                                  shown):
    module = f"safety_models_{factory}"
    _cli_files(tmp_path, monkeypatch, module)
    code = main(_probe("--baseline", f"{module}:build", "--analysis", f"{module}:{factory}"))
    err = capsys.readouterr().err
    assert code == 2 and shown in err and "'--analysis'" in err
    assert f"{module}.py:" in err and "fix:" in err         # the file and its line
    assert "Traceback" not in err and "internal error" not in err
    assert not (tmp_path / "out").exists()


def test_the_debug_setting_shows_the_factorys_traceback(tmp_path, monkeypatch, capsys):
    _cli_files(tmp_path, monkeypatch, "safety_models_debug")
    monkeypatch.setenv("QCDOCTOR_DEBUG", "1")
    code = main(_probe("--baseline", "safety_models_debug:build", "--analysis",
                       "safety_models_debug:explode"))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" in err and 'raise RuntimeError("boom' in err


@pytest.mark.parametrize("source, shown", [
    ("raise ValueError('no config here')\n", "ValueError: no config here"),
    ("import a_package_nobody_installed\n",
     "ModuleNotFoundError: No module named 'a_package_nobody_installed'"),
    ("def broken(:\n", "SyntaxError"),
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
])
def test_a_module_whose_code_raises_is_one_clear_error(tmp_path, monkeypatch, capsys, source,
                                                       shown):
    module = f"safety_module_{abs(hash(source))}"
    (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
    _cli_files(tmp_path, monkeypatch, "safety_models_import")
    code = main(_probe("--baseline", f"{module}:build", "--analysis",
                       "safety_models_import:build"))
    err = capsys.readouterr().err
    assert code == 2 and f"importing {module} fails" in err and shown in err
    assert f"{module}.py:" in err and "'--baseline'" in err and "Traceback" not in err


@pytest.mark.parametrize("device", [
    "xyz", "cuda:999",
    pytest.param("cuda:0", marks=pytest.mark.skipif(torch.cuda.is_available(),
                                                    reason="a GPU is there to run on"))])
def test_a_device_torch_cannot_use_is_one_clear_error(tmp_path, monkeypatch, capsys, device):
    _cli_files(tmp_path, monkeypatch, "safety_models_device")
    code = main(_probe("--baseline", "safety_models_device:build", "--analysis",
                       "safety_models_device:build", "--device", device))
    err = capsys.readouterr().err
    assert code == 2 and "'--device'" in err and repr(device) in err and "fix:" in err
    assert "Traceback" not in err and "internal error" not in err
    assert not (tmp_path / "out").exists()
    base, qat = models()
    with pytest.raises(QcdoctorError) as error:
        compare_models(base, qat, EXAMPLE, tmp_path / "p", device=device)
    assert error.value.key == "device" and not (tmp_path / "p").exists()


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x), self.fc(x) * 2


class One(Two):
    def forward(self, x):
        return self.fc(x)


@pytest.mark.parametrize("options, key", [({}, "sensitivity"),
                                          ({"sensitivity": False, "try_fixes": True},
                                           "try_fixes")])
def test_models_with_different_numbers_of_outputs_say_so(tmp_path, options, key):
    torch.manual_seed(0)
    analysis = eager_qat_linear(Two())
    with pytest.raises(QcdoctorError) as error:
        compare_models(One().eval(), analysis, torch.randn(3, 4), tmp_path / "p", **options)
    message = str(error.value)
    assert "different numbers of outputs: 1 from the baseline, 2 from the analysis" in message
    assert "name(s) given" not in message and error.value.key == key
    assert not (tmp_path / "p").exists()
    # the layer table alone needs no like outputs
    with pytest.warns(ProbeWarning, match="only 1 of 3"):       # two outputs unmatched
        result = compare_models(One().eval(), analysis, torch.randn(3, 4), tmp_path / "p",
                                sensitivity=False)
    assert result.rows and (tmp_path / "p" / "compare_per_layer_out.csv").is_file()


def eager_qat_linear(model: nn.Module) -> nn.Module:
    from torch.ao.quantization import get_default_qat_qconfig, prepare_qat
    model.qconfig = get_default_qat_qconfig("qnnpack")
    prepare_qat(model.train(), inplace=True)
    with torch.no_grad():
        model(torch.randn(8, 4))
    return model.eval()


# -- NaN and inf ----------------------------------------------------------------------------

@pytest.mark.parametrize("inputs, named, counted", [
    (torch.tensor([[float("nan"), 1.0, 2.0, 3.0]]), "input tensor holds", "1 NaN"),
    ((torch.ones(2, 4), torch.tensor([float("inf"), float("-inf"), float("nan")])),
     "input tensor inputs[1] holds", "1 NaN and 2 infinite"),
    ({"x": torch.full((2, 4), float("nan"))}, "inputs['x']", "8 NaN value(s) of 8"),
])
def test_inputs_holding_nan_or_inf_are_refused(tmp_path, inputs, named, counted):
    model = nn.Sequential(nn.Linear(4, 2)).eval()
    with pytest.raises(QcdoctorError) as error:
        compare_models(model, model, inputs, tmp_path / "p", sensitivity=False)
    assert named in str(error.value) and counted in str(error.value)
    assert error.value.key == "inputs" and not (tmp_path / "p").exists()


def test_the_cli_names_the_inputs_file_holding_inf(tmp_path, monkeypatch, capsys):
    _cli_files(tmp_path, monkeypatch, "safety_models_inf")
    torch.save(torch.tensor([[1.0, float("inf"), 0.0, 0.0]]), tmp_path / "bad.pt")
    code = main(_probe("--baseline", "safety_models_inf:build", "--analysis",
                       "safety_models_inf:build", "--inputs", "bad.pt"))
    err = capsys.readouterr().err
    assert code == 2 and "bad.pt" in err and "1 infinite" in err and "Traceback" not in err


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)               # NaN for the negative half of its inputs


def test_a_model_making_nan_leaves_its_rows_empty_and_warns(tmp_path):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(4, 8), Log(), nn.Linear(8, 2)).eval()
    analysis = nn.Sequential(nn.Linear(4, 8), Log(), nn.Linear(8, 2)).eval()
    analysis.load_state_dict(base.state_dict())
    with torch.no_grad():
        analysis[0].weight.add_(0.01)
    with pytest.warns(ProbeWarning, match="2 layer output.s. hold NaN"):
        result = compare_models(base, analysis, torch.randn(3, 4), tmp_path / "p",
                                sensitivity=False)
    assert result.rows[0]["kl"] is not None and result.rows[0]["cosine"] < 1.0
    for row in result.rows[1:]:
        assert row.get("kl") is None and row.get("cosine") is None and row.get("rtol") is None
    frame = load_compare(tmp_path / "p" / "compare_per_layer_out.csv").frame
    for column in ("kl", "cosine", "rtol", "l1"):
        assert frame[column].iloc[1:].isna().all(), column      # empty, never a fake 0.0
    assert not result.mostly_unmatched                          # matched, not measurable
    assert any("NaN" in w for w in result.warnings)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_kl_of_a_non_finite_pair_is_never_zero(bad):
    for size in (8, 5000, 40000):       # float64; float32 with one extremes pass, with two
        base = torch.linspace(-1, 1, size)
        analysis = base.clone()
        analysis[3] = bad
        for first, second in ((base, analysis), (analysis, base), (analysis, analysis)):
            got = pair_stats(first, second)
            assert got["kl"] != 0.0, (size, got)
            if bad != bad:
                assert got["kl"] != got["kl"] and got["rtol"] != got["rtol"], (size, got)


# -- the caller's models are left as they were, whatever interrupts ------------------------

def _state(*models_) -> list:
    found = []
    for model in models_:
        for name, module in model.named_modules():
            entry = [name, module.training]
            if isinstance(module, FakeQuantizeBase):
                entry += [bool(module.observer_enabled[0]), bool(module.fake_quant_enabled[0])]
            found.append(tuple(entry))
    return found


def _mixed_models():
    """A QAT model in training mode with observers on, one fake quant switched off."""
    base, qat = models()
    qat.train()
    for module in qat.modules():
        if isinstance(module, FakeQuantizeBase):
            module.enable_observer()
    qat.fc.weight_fake_quant.disable_fake_quant()
    return base, qat


def _interrupted_runs(tmp_path, monkeypatch, install, *, try_fixes=False, limit=400,
                      stop=KeyboardInterrupt):
    """Runs compare_models with ``stop`` (a Ctrl-C by default) raised at call k of what
    ``install`` patches, k = 1, 2, ... until a run finishes untouched; after each, every
    module's flags are as they were before."""
    counter = {"calls": 0, "at": 0}

    def tick():
        counter["calls"] += 1
        if counter["calls"] == counter["at"]:
            raise stop()
    install(monkeypatch, tick)
    for k in range(1, limit):
        base, qat = _mixed_models()
        before = _state(base, qat)
        counter.update(calls=0, at=k)
        try:
            compare_models(base, qat, EXAMPLE, tmp_path / f"run{k}", names=["a", "b"],
                           try_fixes=try_fixes, fix_budget=4)
            finished = True
        except stop:
            finished = False
        assert _state(base, qat) == before, f"interrupted at call {k}"
        if finished:
            return k
    raise AssertionError("never finished")


def _patch_switches(monkeypatch, tick):
    real_observer, real_fake = FakeQuantizeBase.enable_observer, FakeQuantizeBase.enable_fake_quant

    def enable_observer(self, enabled=True):
        tick()
        real_observer(self, enabled)

    def enable_fake_quant(self, enabled=True):
        tick()
        real_fake(self, enabled)
    monkeypatch.setattr(FakeQuantizeBase, "enable_observer", enable_observer)
    monkeypatch.setattr(FakeQuantizeBase, "enable_fake_quant", enable_fake_quant)


def _patch_restore(monkeypatch, tick):
    real_modes, real_switches = probe_compare._restore_modes, probe_compare._restore_switches

    def modes(saved):
        tick()
        real_modes(saved)

    def switches(saved):
        tick()
        real_switches(saved)
    monkeypatch.setattr(probe_compare, "_restore_modes", modes)
    monkeypatch.setattr(probe_compare, "_restore_switches", switches)


def test_an_interrupt_while_switching_quantizers_leaves_the_models_as_they_were(
        tmp_path, monkeypatch):
    calls = _interrupted_runs(tmp_path, monkeypatch, _patch_switches)
    assert calls > 5                  # freezing, the sensitivity pass and restoring were hit


def test_a_stop_signal_while_switching_quantizers_leaves_the_models_as_they_were(
        tmp_path, monkeypatch):
    """The command line turns SIGTERM into Terminated (a SystemExit) in the main thread."""
    from qcdoctor.engine.matching.termination import Terminated

    class Stopped(Terminated):
        def __init__(self):
            super().__init__(signal.SIGTERM)
    _interrupted_runs(tmp_path, monkeypatch, _patch_switches, stop=Stopped)


def test_an_interrupt_inside_any_forward_leaves_the_models_as_they_were(tmp_path, monkeypatch):
    handles = []

    def install(patch, tick):
        handles.append(torch.nn.modules.module.register_module_forward_pre_hook(
            lambda module, args: tick()))
    try:
        calls = _interrupted_runs(tmp_path, monkeypatch, install, limit=2000)
    finally:
        for handle in handles:
            handle.remove()
    assert calls > 20


def test_an_interrupt_inside_the_restore_itself_is_undone_too(tmp_path, monkeypatch):
    calls = _interrupted_runs(tmp_path, monkeypatch, _patch_restore)
    assert calls >= 3


def test_an_interrupt_during_the_fix_trials_leaves_the_models_as_they_were(
        tmp_path, monkeypatch):
    _interrupted_runs(tmp_path, monkeypatch, _patch_switches, try_fixes=True)


def test_a_ctrl_c_during_the_restore_waits_until_it_is_done(tmp_path, monkeypatch):
    """A real SIGINT arriving as the first observer is switched back on: held until every
    switch and flag is back, then raised."""
    base, qat = _mixed_models()
    before = _state(base, qat)
    real = FakeQuantizeBase.enable_observer
    sent = []

    def enable_observer(self, enabled=True):
        if enabled and not sent:                    # the restore, not the freezing
            sent.append(1)
            signal.raise_signal(signal.SIGINT)      # handled before the next bytecode
        real(self, enabled)
    monkeypatch.setattr(FakeQuantizeBase, "enable_observer", enable_observer)
    with pytest.raises(KeyboardInterrupt):
        compare_models(base, qat, EXAMPLE, tmp_path / "p", names=["a", "b"])
    assert sent and _state(base, qat) == before


# -- the sensitivity pass -------------------------------------------------------------------

class _Switches:
    """A quantizer adapter over plain flags; ``run`` gives the output for what is on."""

    def __init__(self, effects: dict):
        from qcdoctor.probe import Quantizer
        self.effects = effects
        self.on = dict.fromkeys(effects, True)
        self.found = [Quantizer(name, "activation", "Op", "qint8", nn.Identity())
                      for name in effects]

    def quantizers(self, model):
        return self.found

    def is_enabled(self, q):
        return self.on[q.op_name]

    def set_enabled(self, q, enabled):
        self.on[q.op_name] = enabled

    def run(self, model):
        out = torch.linspace(-1, 1, 16)
        for name, effect in self.effects.items():
            if self.on[name]:
                out = effect(out)
        return out


@pytest.mark.parametrize("metric", ["L1", "Cosine"])
def test_a_quantizer_that_makes_nan_is_first_in_its_table(metric):
    from qcdoctor.probe.sensitivity import METRICS, sensitivity
    switches = _Switches({"small": lambda x: x + 0.01, "broken": lambda x: x * float("nan"),
                          "large": lambda x: x + 0.5})
    rows = sensitivity(None, switches, switches.run, [torch.linspace(-1, 1, 16)], metric)[0]
    assert [r[0] for r in rows] == ["broken", "large", "small"], (METRICS[metric], rows)
    assert all(switches.on.values())


def test_a_model_failing_with_one_quantizer_on_is_one_clear_error():
    from qcdoctor.probe.sensitivity import sensitivity

    def fails_alone(x):
        if not switches.on["other"]:
            raise RuntimeError("needs the other one")
        return x
    switches = _Switches({"picky": fails_alone, "other": lambda x: x + 0.1})
    with pytest.raises(QcdoctorError, match="only the quantizer of picky .activation. on "
                                            r"\(RuntimeError: needs the other one\)") as error:
        sensitivity(None, switches, switches.run, [torch.linspace(-1, 1, 16)], "L1")
    assert error.value.key == "sensitivity" and "--no-sensitivity" in str(error.value)
    assert all(switches.on.values())                            # every switch back on


def test_names_given_as_one_text_are_refused(tmp_path):
    base, qat = models()
    with pytest.raises(QcdoctorError, match="not a list of names") as error:
        compare_models(base, qat, EXAMPLE, tmp_path / "p", names="logits")
    assert error.value.key == "names" and not (tmp_path / "p").exists()
