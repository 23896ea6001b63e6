"""Fuzzing the probe's output folder: an earlier probe_run.yaml whose ``files`` list holds
absolute paths, ``..``, links out of the folder, folders, unicode and things that are no
names at all, beside links and folders of the user's, with output names of every kind.
Every run ends in success or in one QcdoctorError; nothing outside the folder changes,
and a refused run changes nothing inside it either.

Same settings as tests/safety/test_fuzz.py: a fixed seed and a bounded number of examples in CI;
``QCDOCTOR_FUZZ_EXAMPLES=N`` runs a longer campaign with fresh randomness.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import yaml  # noqa: E402
from hypothesis import event, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from qcdoctor.errors import QcdoctorError  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from qcdoctor.probe.compare import is_probe_file  # noqa: E402
from tests.probe_nets import eager_qat  # noqa: E402
from tests.safety.test_fuzz import fuzz  # noqa: E402

EXAMPLE = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(2))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.pool(torch.relu(self.conv(x))).flatten(1)
        return {"logits": self.fc(y), "scores": self.fc(y) * 2.0}


@functools.cache
def _models():
    torch.manual_seed(0)
    base = Net().eval()
    return base, eager_qat(base)


# entries a manifest may list: {victim} and {victim_dir} become absolute paths outside
NAMED = ["{victim}", "{victim_dir}", "{victim_dir}/kept.txt", "../victim.txt", "../victim_dir",
         "../victim_dir/kept.txt", "./compare_per_layer_out.csv", "link_out", "link_dir",
         "folder", "folder/inside.txt", "compare_per_layer_out.csv", "fx_graph.txt",
         "output_a_L1_sensitive_ops.txt", "output_../x_L1_sensitive_ops.pt", "probe_run.yaml",
         "fix_trials.yaml", ".", "..", "", "/", "notes.txt", "出力_L1_sensitive_ops.txt"]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
ENTRY = st.one_of(st.sampled_from(NAMED), TEXT, st.integers(), st.none(),
                  st.lists(TEXT, max_size=2), st.dictionaries(TEXT, TEXT, max_size=1))
OURS = ["compare_per_layer_out.csv", "compare_per_layer_out.txt", "fx_graph.txt",
        "output_a_L1_sensitive_ops.txt", "output_b_MSE_sensitive_ops.pt", "fix_trials.yaml"]
NAME = st.one_of(st.sampled_from(["a", "b", "a/b", "..", "", "x\x00y", "出力", "n" * 300,
                                  "../up", "logits"]), TEXT)
# what the user has inside the folder besides the manifest (probe names made links too)
INSIDE = ["link_out", "link_dir", "folder", "notes.txt", "compare_per_layer_out.csv",
          "fx_graph.txt", "output_a_L1_sensitive_ops.txt", "probe_run.yaml"]


def _snapshot(root: Path, skip: Path | None = None) -> dict:
    """Every entry under ``root`` (``skip``'s subtree aside), links not followed."""
    found = {}
    for folder, dirs, files in os.walk(root):
        if skip is not None and Path(folder) == skip:
            dirs[:] = []
            continue
        for name in dirs + files:
            path = Path(folder) / name
            if skip is not None and path == skip:
                continue
            info = os.lstat(path)
            if path.is_symlink():
                found[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                found[str(path)] = ("dir", info.st_mode)
            else:
                found[str(path)] = ("file", path.read_bytes(), info.st_mode)
    return found


def _lay_out(root: Path, data) -> Path:
    """The user's files outside, the output folder with what ``data`` draws inside."""
    (root / "victim.txt").write_text("the user's own", encoding="utf-8")
    (root / "victim_dir").mkdir()
    (root / "victim_dir" / "kept.txt").write_text("kept", encoding="utf-8")
    out = root / "out"
    out.mkdir()
    for name in data.draw(st.lists(st.sampled_from(INSIDE), unique=True, max_size=2)):
        kind = data.draw(st.sampled_from(["file", "link out", "link dir", "folder"]))
        path = out / name
        if kind == "file":
            path.write_text("earlier", encoding="utf-8")
        elif kind == "link out":
            path.symlink_to(root / "victim.txt")
        elif kind == "link dir":
            path.symlink_to(root / "victim_dir")
        else:
            path.mkdir()
            (path / "inside.txt").write_text("mine", encoding="utf-8")
    manifest = out / "probe_run.yaml"
    if not manifest.is_symlink() and not manifest.is_dir() and data.draw(st.booleans()):
        entries = data.draw(st.lists(st.one_of(ENTRY, st.sampled_from(OURS)), max_size=6))
        entries = [e.replace("{victim_dir}", str(root / "victim_dir"))
                   .replace("{victim}", str(root / "victim.txt")) if isinstance(e, str) else e
                   for e in entries]
        document = {"origin": "probe", "files": entries} if data.draw(st.booleans()) else \
            data.draw(st.sampled_from([{"files": "compare_per_layer_out.csv"}, [], "files:",
                                       {"files": None}]))
        manifest.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    return out


@fuzz(ci_examples=40)
@given(data=st.data())
def test_a_probe_run_never_touches_what_it_did_not_write(data):
    base, qat = _models()
    kind = data.draw(st.sampled_from(["derived", "given", "given", "drawn"]))
    names = data.draw(st.lists(NAME, min_size=2, max_size=2)) if kind == "drawn" else \
        {"derived": None, "given": ["a", "b"]}[kind]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        out = _lay_out(root, data)
        outside, inside = _snapshot(root, skip=out), _snapshot(out)
        try:
            result = compare_models(base, qat, EXAMPLE, out, names=names)
        except QcdoctorError as error:
            event(f"refused: {error.key or 'folder'}")
            assert error.render(), "an empty message"
            assert _snapshot(out) == inside, "a refused run changed the folder"
        else:
            event("written")
            present = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
            assert all(is_probe_file(name) for name in present), present
            assert sorted(p.name for p in result.files) == present
            assert all(not p.is_symlink() for p in out.iterdir())
        assert _snapshot(root, skip=out) == outside, "a file outside the folder changed"
