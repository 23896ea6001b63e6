"""``qcdoctor probe --samples FILE_OR_DIR [--max-samples N] [--badcase INDEX]``: a file
holding a list of samples or a folder of sample files, searched before the layers are
read; its line says on how many samples the error shows and which one was read. Bad
options are one clear error before any model runs, and nothing is written."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from qcdoctor.engine.commands.cli import main  # noqa: E402
from tests.probe.test_probe import MODELS_PY  # noqa: E402


@pytest.fixture
def case(tmp_path, monkeypatch):
    (tmp_path / "samples_cli_models.py").write_text(MODELS_PY, encoding="utf-8")
    generator = torch.Generator().manual_seed(0)
    samples = [torch.randn(3, 4, generator=generator) * (4.0 if i == 2 else 1.0)
               for i in range(5)]
    torch.save(samples, tmp_path / "samples.pt")
    (tmp_path / "folder").mkdir()
    for i, sample in enumerate(samples):
        torch.save(sample, tmp_path / "folder" / f"{i:05d}.pt")
    (tmp_path / "folder" / "README.txt").write_text("not a sample", encoding="utf-8")
    torch.save(samples[0], tmp_path / "one.pt")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def probe(*options: str) -> int:
    return main(["probe", "--baseline", "samples_cli_models:build", "--analysis",
                 "samples_cli_models:build_rounded", "--out", "out", "--no-sensitivity",
                 "--lang", "en", *options])


@pytest.mark.parametrize("given", ["samples.pt", "folder"])
def test_samples_from_a_file_or_a_folder_are_searched(case, capsys, given):
    assert probe("--samples", given) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    manifest = yaml.safe_load((case / "out" / "probe_run.yaml").read_text(encoding="utf-8"))
    found = manifest["samples"]
    assert found["count"] == 5 and found["chosen"] == 2 and found["chosen_by"] == "worst"
    assert {"badcase.txt", "sample_errors.csv"} <= set(manifest["files"])
    assert "searched 5 samples" in out and "read on sample 2, the worst by L1" in out


def test_max_samples_and_a_chosen_sample(case, capsys):
    assert probe("--samples", "folder", "--max-samples", "3", "--badcase", "1") == 0
    out = capsys.readouterr().out
    found = yaml.safe_load((case / "out" / "probe_run.yaml").read_text("utf-8"))["samples"]
    assert found["count"] == 3 and found["chosen"] == 1 and found["chosen_by"] == "given"
    assert f"rank {found['rank']} of 3" in out


@pytest.mark.parametrize("options, message", [
    (["--samples", "folder", "--badcase", "5"], "--badcase 5 is past the last sample"),
    (["--samples", "folder", "--max-samples", "2", "--badcase", "2"], "past the last sample"),
    (["--samples", "folder", "--max-samples", "0"], "--max-samples is 0"),
    (["--inputs", "one.pt", "--badcase", "1"], "choose among many samples"),
    (["--samples", "one.pt"], "not a list of samples"),
    (["--samples", "missing"], "file or folder not found"),
    (["--samples", "empty"], "holds no sample files"),
])
def test_bad_sample_options_are_one_clear_error(case, capsys, options, message):
    (case / "empty").mkdir()
    assert probe(*options) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (case / "out").exists()


def test_inputs_and_samples_exclude_each_other(case, capsys):
    with pytest.raises(SystemExit) as stopped:
        probe("--inputs", "one.pt", "--samples", "samples.pt")
    assert stopped.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
