"""Two probes into one folder at once: their writes never mix. The second waits while the
first puts its files in place, then replaces them whole, as a rerun does; the folder is
one run's output (its manifest lists exactly its files, its table and graph agree), and a
later probe into it is not refused."""

from __future__ import annotations

import csv
import multiprocessing
import time
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from qcdoctor.probe import compare as probe_compare  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402


def _model(width: int) -> nn.Module:
    torch.manual_seed(width)
    layers = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
    for _ in range(width // 4):
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*layers).eval()


def _probe(out: str, width: int, started, go) -> None:
    torch.set_num_threads(1)
    model = _model(width)
    original = probe_compare._stage

    def stage(*args, **kwargs):              # both runs reach their writes together
        staged = original(*args, **kwargs)
        started.set()
        go.wait(30)
        return staged
    put_in_place = probe_compare.put_in_place
    done = []

    def slowly(*args, **kwargs):
        # the runs' writes interleave: the first waits before its first file only, the
        # second before each file but its first (unsynchronised, the folder ends with the
        # first run's first files and the second run's last ones)
        if (width == 4) == (not done):
            time.sleep(0.3 if width == 4 else 0.2)
        done.append(1)
        return put_in_place(*args, **kwargs)
    probe_compare._stage = stage
    probe_compare.put_in_place = slowly
    compare_models(model, model, torch.randn(1, 3, 8, 8), out, sensitivity=False)


def _whole(out: Path) -> None:
    manifest = yaml.safe_load((out / "probe_run.yaml").read_text(encoding="utf-8"))
    present = {p.name for p in out.iterdir() if not p.name.startswith(".qcdoctor-")}
    assert present == {"probe_run.yaml", *manifest["files"]}, (present, manifest["files"])
    with open(out / "compare_per_layer_out.csv", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, skipinitialspace=True))[1:]
    with open(out / "layer_calls.csv", encoding="utf-8") as handle:
        calls = list(csv.DictReader(handle))
    assert len(rows) == len(calls) == manifest["layers"]
    assert [r[0] for r in rows] == [c["name"] for c in calls]


def test_two_probes_into_one_folder_never_mix(tmp_path):
    out = tmp_path / "qa_probe"
    # spawned, not forked: a fork of a process whose torch thread pools already run can
    # hang in its first parallel op
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    started = [context.Event(), context.Event()]
    runs = [context.Process(target=_probe, args=(str(out), width, started[i], go))
            for i, width in enumerate((4, 12))]
    for run in runs:
        run.start()
    for event in started:
        assert event.wait(120)
    go.set()
    for run in runs:
        run.join(180)
        assert run.exitcode == 0
    _whole(out)
    compare_models(_model(8), _model(8), torch.randn(1, 3, 8, 8), out, sensitivity=False)
    _whole(out)
