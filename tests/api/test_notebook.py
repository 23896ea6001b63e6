"""The example notebook, run in a real Jupyter kernel (this Python, ipykernel), and the
outputs it produced; and a kernel interrupted in the middle of triages, which triages
again afterwards with no process or temporary folder left behind."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from qcdoctor.engine.commands.examples import copy_example, example_names
from tests.paths import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
from jupyter_client import KernelManager  # noqa: E402 - after the skips
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402

NOTEBOOK = REPO / "examples" / "python_api.ipynb"
KERNEL = "qcdoctor-tests"


def kernel_specs(folder: Path) -> KernelSpecManager:
    """Kernel specs holding one kernel: ipykernel on this Python (whatever kernels the
    machine has installed)."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "qcdoctor tests", "language": "python"}), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(folder / "kernels")], ensure_native_kernel=False)


def kernel_environment(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if "BOARD_TYPE" not in k}
    env["TMPDIR"] = str(tmp)                # every temporary folder of the kernel goes here
    env.pop("MPLBACKEND", None)             # the kernel's own: matplotlib's inline backend
    return env


# runs the notebook in a kernel and saves it with its outputs: NOTEBOOK OUT WORK TMP SPECS
EXECUTE = """
import sys
from pathlib import Path

import nbclient
import nbformat
from jupyter_client import AsyncKernelManager

from tests.api.test_notebook import KERNEL, kernel_environment, kernel_specs

source, out, work, tmp, specs = map(Path, sys.argv[1:6])
notebook = nbformat.read(source, as_version=4)
manager = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs(specs))
nbclient.NotebookClient(notebook, km=manager, timeout=300, kernel_name=KERNEL,
                        resources={"metadata": {"path": str(work)}}).execute(
    env=kernel_environment(tmp))
nbformat.write(notebook, out)
"""


def page_of(output: dict) -> str:
    """The HTML report inside a report's notebook output (an iframe's srcdoc)."""
    shown = output["data"]["text/html"]
    assert shown.startswith("<iframe ")
    return html.unescape(re.search(r'srcdoc="([^"]*)"', shown).group(1))


def test_the_notebook_is_no_example_case():
    assert "python_api" not in example_names()


def test_the_example_notebook_runs_in_a_kernel(tmp_path):
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code"), \
        "the notebook is kept without outputs"
    # executed from a process of its own: nbclient leaves an event-loop thread running in
    # the process that drives it, and a process with threads never forks (other tests
    # need this one to)
    executed = tmp_path / "executed.ipynb"
    import subprocess
    done = subprocess.run([sys.executable, "-c", EXECUTE, str(NOTEBOOK), str(executed),
                           str(work), str(tmp), str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    notebook = nbformat.read(executed, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o["output_type"] == "error"]
    shown = [o for o in outputs if "text/html" in o.get("data", {})]
    assert len(shown) == 3                  # the two reports and the probe result, as HTML
    result = shown[1]["data"]["text/html"]
    # the probe result: its summary and the per-layer chart of its own table
    assert result.startswith('<div class="qcdoctor-probe"><p>') and result.count("<svg") == 1
    assert "text/markdown" in shown[1]["data"]
    # the English notebook speaks English: the probe's summary and its chart's labels too
    assert "compared " in result and not re.search(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]",
                                                   result + shown[1]["data"]["text/markdown"])
    first, probe = (page_of(o) for o in (shown[0], shown[2]))
    # the case from numbers: its conclusion, and the stage chain drawn
    assert "qat.bc is normal and quantized.bc abnormal" in first and "<svg" in first
    assert "text/markdown" in shown[0]["data"]
    # the probed model: the layer curve and the sensitivity bars drawn from the probe's
    # tables, and the layer the fault was put after found
    assert first.count("<svg") < probe.count("<svg")
    assert 'class="plot" id="plot-layers' in probe and 'id="plot-sensitivity' in probe
    assert "features.stage2.unit1.identity_conv.conv" in probe
    # read along the probe's graph with each layer's own error: one origin at the conv
    # whose scale is a hundred times too small, truncation, no accumulation (R4.1-R4.3)
    listed = next(o["data"]["text/plain"] for o in outputs
                  if o.get("data", {}).get("text/plain", "").startswith("[("))
    assert "LY019" in listed and ("LY030" in listed or "LY034" in listed), listed
    assert not {"LY011", "LY016", "LY017"} & set(re.findall(r"LY\d+", listed)), listed
    assert "layer_own_error.csv" in {p.name for p in (work / "python_api_case" / "qa_probe").iterdir()}
    last = code[-1].outputs[-1]
    assert last["data"]["text/plain"] == "'calibration'"
    case = work / "python_api_case"
    assert (case / "case.yaml").is_file() and (case / "report.html").is_file()
    assert (case / "qa_probe" / "compare_per_layer_out.csv").is_file()
    # qcdoctor's temporary folders (the probe's spilled outputs, ...) are all gone; torch
    # keeps a compile cache of its own there
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("qcdoctor")]


WARM = """
import json, os, qcdoctor
def children():
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = stat.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):          # no process, or gone meanwhile
            continue
        if parent == me:
            found.append(int(entry))
    return found
expected = qcdoctor.triage(example="convert_quant_analysis", lang="en").to_dict()
qcdoctor.triage(BUNDLE).to_html()
engine = qcdoctor.engine.matching.engine_process.engine_process()
before = set(children()) - {engine.worker_pid()}
"""
LOOP = """
print("looping", flush=True)
while True:
    qcdoctor.triage(BUNDLE)
    qcdoctor.triage(example="convert_quant_analysis", lang="en").to_html()
    qcdoctor.Case(chip="J6E", stages={"qat_bc": 0.44, "quantized_bc": 0.39}).triage()
"""
CHECK = """
from qcdoctor.engine.matching.engine_process import engine_process
report = qcdoctor.triage(example="convert_quant_analysis", lang="en")
engine = engine_process()
# any child but the engine's worker and the successor it started last is left behind
strays = set(children()) - before - {engine.worker_pid(), engine.stats.last_worker_pid}
print(json.dumps({"same": report.to_dict() == expected, "strays": sorted(strays),
                  "tmp": sorted(os.listdir(os.environ["TMPDIR"]))}))
"""


@contextmanager
def running_kernel(folder: Path, env: dict):
    manager = KernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs(folder))
    manager.start_kernel(env=env, cwd=str(folder))
    client = manager.blocking_client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        yield manager, client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_cell(client, code: str, timeout: float = 300) -> tuple[dict, str]:
    printed = []

    def output(message):
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
    reply = client.execute_interactive(code, timeout=timeout, output_hook=output)
    return reply["content"], "".join(printed)


def interrupted(manager, client) -> dict:
    """The reply of the cell running, interrupted. Now and then a kernel misses an
    interrupt (whatever runs in it), so after a while it is asked again, as a user
    would press the button again."""
    import queue
    for _ in range(5):
        manager.interrupt_kernel()
        try:
            return client.get_shell_msg(timeout=15)
        except queue.Empty:
            continue
    raise AssertionError("the kernel was never interrupted")


def test_a_kernel_interrupted_in_a_triage_triages_again(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    case = copy_example("convert_quant_analysis", str(tmp_path / "case"))
    from qcdoctor.engine.commands.cli import main
    assert main(["pack", str(case), "-o", str(tmp_path / "case.tar.gz")]) == 0
    shutil.rmtree(case)
    bundle = repr(str(tmp_path / "case.tar.gz"))
    with running_kernel(tmp_path, kernel_environment(tmp)) as (manager, client):
        reply, _ = run_cell(client, WARM.replace("BUNDLE", bundle))
        assert reply["status"] == "ok", reply
        # Ctrl-C after a different time each round: it falls wherever a triage then is
        for wait in (0.05, 0.3, 0.8, 1.5):
            # (stop_on_error: the kernel would drop a cell sent just after an error)
            message_id = client.execute(LOOP.replace("BUNDLE", bundle), stop_on_error=False)
            while True:             # the loop has started
                message = client.get_iopub_msg(timeout=60)
                if message["parent_header"].get("msg_id") == message_id and \
                        message["msg_type"] == "stream":
                    break
            time.sleep(wait)
            reply = interrupted(manager, client)
            assert reply["parent_header"]["msg_id"] == message_id
            assert reply["content"]["status"] == "error"
            assert reply["content"]["ename"] == "KeyboardInterrupt"
        reply, printed = run_cell(client, CHECK)
        assert reply["status"] == "ok", reply
        state = json.loads(printed.strip().splitlines()[-1])
    assert state == {"same": True, "strays": [], "tmp": []}
