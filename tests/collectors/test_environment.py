"""Environment facts: installed versions, .env.board, board variables; the case wins."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors.case_facts import collect_facts
from qcdoctor.collectors.environment import (
    THIS_MACHINE,
    detect_march,
    installed_versions,
    read_env_board,
)
from qcdoctor.collectors.versions import at_least, parse_version
from tests.conftest import case_from

BOARD = """# board file
BOARD_IP=<板卡 IP>
BOARD_TYPE=nash-e/m
BPU_ARCH=nash-m
BOARD_TYPE_NASH_P=nash-p
"""


def _board(folder: Path, rel: str = ".drobotics-s/.env.board", text: str = BOARD) -> Path:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_env_board_skips_placeholders_and_prefers_bpu_arch(tmp_path):
    values = read_env_board(_board(tmp_path))
    assert "BOARD_IP" not in values
    march, source = detect_march(tmp_path, cwd=tmp_path, environ={})
    assert march == "nash-m"
    assert source.endswith(".env.board:4 (BPU_ARCH)")


def test_older_horizon_folder_and_then_the_working_directory(tmp_path):
    case_dir, cwd = tmp_path / "case", tmp_path / "cwd"
    case_dir.mkdir()
    _board(cwd, ".horizon/.env.board", "BOARD_TYPE=nash-p\n")
    march, source = detect_march(case_dir, cwd=cwd, environ={})
    assert march == "nash-p" and source.startswith(THIS_MACHINE)     # the working directory's
    assert detect_march(case_dir, cwd=cwd, environ={}, use_env=False) is None
    _board(case_dir, ".horizon/.env.board", "BOARD_TYPE=nash-e\n")
    assert detect_march(case_dir, cwd=cwd, environ={}) == ("nash-e", ".horizon/.env.board:1 (BOARD_TYPE)")
    assert detect_march(case_dir, cwd=cwd, environ={}, use_env=False)[0] == "nash-e"


def test_variables_in_order_and_invalid_values_ignored(tmp_path):
    env = {"BOARD_TYPE": "nash-e", "OE_BOARD_TYPE": "nash-p", "HORIZON_BOARD_TYPE": "bogus"}
    assert detect_march(tmp_path, cwd=tmp_path, environ=env) == \
        ("nash-p", THIS_MACHINE + "environment variable OE_BOARD_TYPE")


def test_case_file_wins_over_environment(tmp_path):
    _board(tmp_path)
    facts = collect_facts(case_from({"platform": {"chip": "J6P"},
                                     "versions": {"hbdk4-compiler": "4.4.1"}}, tmp_path),
                          environ={"BOARD_TYPE": "nash-e"}, cwd=tmp_path,
                          installed={"hbdk4-compiler": ("4.9.0", THIS_MACHINE + "installed package hbdk4-compiler")})
    platform = next(f for f in facts if f["type"] == "platform")
    hbdk = next(f for f in facts if f["type"] == "version" and f["package"] == "hbdk4-compiler")
    assert (platform["march"], platform["strategy_chip"]) == ("nash-p", False)
    assert platform["source"].startswith("case.yaml")
    assert (hbdk["version"], hbdk["meets"]) == ("4.4.1", "no")


def test_environment_fills_what_the_case_leaves_out(tmp_path):
    _board(tmp_path)
    facts = collect_facts(case_from({}, tmp_path), environ={}, cwd=tmp_path,
                          installed={"hbdk4-compiler": ("4.5.0", THIS_MACHINE + "installed package hbdk4-compiler")})
    platform = next(f for f in facts if f["type"] == "platform")
    hbdk = next(f for f in facts if f["type"] == "version" and f["package"] == "hbdk4-compiler")
    assert (platform["chip"], platform["strategy_chip"]) == ("J6M", True)
    assert ".env.board" in platform["source"]
    assert (hbdk["version"], hbdk["meets"], hbdk["source"]) == \
        ("4.5.0", "yes", THIS_MACHINE + "installed package hbdk4-compiler")


def test_installed_versions_say_they_describe_this_machine():
    assert all(source.startswith(THIS_MACHINE) for _, source in installed_versions().values())


def test_no_env_ignores_this_machine_but_keeps_the_case_folder(tmp_path):
    case_dir, cwd = tmp_path / "case", tmp_path / "cwd"
    case_dir.mkdir()
    _board(cwd)
    installed = {"hbdk4-compiler": ("4.9.0", THIS_MACHINE + "installed package hbdk4-compiler")}
    env = {"BOARD_TYPE": "nash-p"}
    facts = collect_facts(case_from({}, case_dir), environ=env, cwd=cwd, installed=installed,
                          use_env=False)
    assert not any(str(f.get("source", "")).startswith(THIS_MACHINE) for f in facts)
    assert next(f for f in facts if f["type"] == "platform")["known"] is False
    _board(case_dir, text="BPU_ARCH=nash-e\n")
    facts = collect_facts(case_from({}, case_dir), environ=env, cwd=cwd, installed=installed,
                          use_env=False)
    platform = next(f for f in facts if f["type"] == "platform")
    assert (platform["march"], platform["source"]) == ("nash-e", ".drobotics-s/.env.board:1 (BPU_ARCH)")


def test_nothing_known_is_unknown(tmp_path):
    facts = collect_facts(case_from({}, tmp_path), environ={}, cwd=tmp_path, installed={})
    platform = next(f for f in facts if f["type"] == "platform")
    assert (platform["known"], platform["source"]) == (False, "not given")


def test_version_comparison():
    assert parse_version("4.4.2.post1").release == (4, 4, 2)
    # PEP 440: a release candidate is below its release, a post release above it
    assert not at_least("4.4.2rc1", "4.4.2") and at_least("4.4.2.post1", "4.4.2")
    assert not at_least("4.4.2.dev3", "4.4.2") and at_least("4.4.3rc1", "4.4.2")
    assert at_least("4.10", "4.4.2") and at_least("4.4.2", "4.4.2")
    assert not at_least("4.4.1", "4.4.2") and not at_least("3.0.9", "3.1.2")
    assert at_least("dev", "4.4.2") is None


def test_distribution_versions_answer_as_importlib_metadata_does():
    from importlib import metadata

    from qcdoctor.collectors.environment import distribution_versions
    # those found as metadata folders on sys.path (eggs and custom finders are not looked at)
    names = sorted({d.metadata["Name"] for d in metadata.distributions()
                    if str(getattr(d, "_path", "")).endswith((".dist-info", ".egg-info"))})
    assert len(names) > 10                       # pytest, pyyaml, jinja2, pandas, ...
    assert distribution_versions(names + ["no-such-distribution"]) == {
        name: metadata.version(name) for name in names}


def test_distribution_versions_first_on_the_path_wins_in_every_metadata_layout(tmp_path,
                                                                               monkeypatch):
    from qcdoctor.collectors.environment import distribution_versions

    def dist_info(folder: Path, name: str, version: str) -> None:
        meta = folder / f"{name}-{version}.dist-info"
        meta.mkdir(parents=True)
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: x\nVersion: {version}\n"
                                       "\nVersion: 0.0 (the body, not a header)\n")
    first, second = tmp_path / "first", tmp_path / "second"
    dist_info(first, "horizon_plugin_pytorch", "3.1.2rc1")
    dist_info(second, "horizon_plugin_pytorch", "9.9.9")
    dist_info(second, "Horizon_Plugin.Profiler", "2.0")           # spelled differently
    egg = second / "hbdk4_compiler-4.4.2-py3.11.egg-info"           # a legacy egg-info file
    egg.write_text("Metadata-Version: 1.1\nName: hbdk4-compiler\nVersion: 4.4.2.post1\n")
    (first / "broken-1.0.dist-info").mkdir()                        # no METADATA: not there
    monkeypatch.setattr("sys.path", [str(tmp_path / "gone"), str(first), str(second)])
    assert distribution_versions(["horizon-plugin-pytorch", "horizon-plugin-profiler",
                                  "hbdk4-compiler", "broken"]) == {
        "horizon-plugin-pytorch": "3.1.2rc1", "horizon-plugin-profiler": "2.0",
        "hbdk4-compiler": "4.4.2.post1"}
