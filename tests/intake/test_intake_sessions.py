"""The two sessions of issue 11, in a real pseudo-terminal: how many questions each asks
(the test fails if that grows) and that none of them could have been skipped."""

from __future__ import annotations

import io
import re

import pexpect

from qcdoctor.engine.reports.termtext import display_width
from tests.intake.test_intake import DOWN, ENTER, SPACE, answer_menu, answer_text, case_of, spawn

# questions asked, re-asks not counted; lower them when the intake learns to ask fewer
J6M_CONVERT_QUESTIONS = 14     # the step-0 question included
BOARD_WITH_SCRIPT_QUESTIONS = 15

# written for this test: the facts a compile script can state (MEAN / STD in
# insert_image_preprocess, an NV12 insert_image_convert, a transpose)
COMPILE_SCRIPT = '''\
import hbdk4.compiler as hbc
from hbdk4.compiler import load

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]

bc = load("qat.bc")
for inp in bc.functions[0].inputs:
    node = inp.insert_transpose(permutes=[0, 3, 1, 2])
    node = node.insert_image_preprocess(mode="yuvbt601full2rgb", divisor=1, mean=MEAN, std=STD)
    node.insert_image_convert("nv12")
quantized = hbc.convert(bc, "nash-e")
hbc.compile(quantized, "model.hbm", march="nash-e")
'''
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def asked(transcript: str) -> list[str]:
    """The question headers shown, once each ('[3] Which metric ...')."""
    return list(dict.fromkeys(re.findall(r"^\[(\d+)\] (.+?)\r?$", _ANSI.sub("", transcript),
                                         flags=re.M)))


def confirm_default(child, prompt: str, default: str) -> None:
    child.expect_exact(prompt)
    child.expect_exact(f"> [{default}] ")
    child.sendline("")


def help_then_enter(child, prompt: str, help_text: str) -> None:
    """``?`` on a menu shows the help; Enter then picks the highlighted choice."""
    child.expect_exact(prompt)
    child.expect_exact("›")
    child.send("?")
    child.expect_exact(help_text)
    child.expect_exact("›")
    child.send(ENTER)


_STEPS = {"menu": answer_menu, "type": answer_text, "enter": confirm_default,
          "help": help_then_enter, "says": lambda child, text, _: child.expect_exact(text)}


def play(child, steps: list[tuple[str, str, str]]) -> None:
    """Go through a session: (menu, prompt, keys) | (type, prompt, text) | (enter, prompt,
    the default expected) | (help, prompt, help text) | (says, text, "")."""
    for kind, prompt, value in steps:
        _STEPS[kind](child, prompt, value)


def test_j6m_convert_drop_in_english(tmp_path):
    folder = tmp_path / "j6m"
    child = spawn(folder, "--lang", "en")
    child.logfile_read = transcript = io.StringIO()
    play(child, [("type", "Describe the symptom", "quantized.bc mAP 0.391 vs qat.bc 0.449"),
                 ("menu", "How was the problem observed?", SPACE + ENTER),
                 ("enter", "Which metric", "mAP"),
                 ("type", "Result of qat.pt?", "0.452"),
                 ("enter", "Result of qat.bc?", "0.449"),
                 ("enter", "Result of quantized.bc?", "0.391"),
                 ("menu", "stable, reproducible bad case?", ENTER),                # available
                 ("menu", "Which chip is the target?", DOWN + ENTER),              # J6M
                 ("type", "hbdk4-compiler version?", "4.4.2"),
                 ("type", "horizon-plugin-pytorch version?", "3.1.5"),
                 ("type", "horizon-plugin-profiler version?", "3.1.5"),
                 ("menu", "Can you retrain (QAT)?", ENTER),                        # yes
                 ("menu", "Which consistency levels were tried already?", ENTER),  # none
                 ("menu", "the same at every stage?", ENTER)])                     # yes
    child.expect_exact("Conclusion: convert")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    questions = asked(transcript.getvalue())
    assert len(questions) <= J6M_CONVERT_QUESTIONS, questions
    shown = " ".join(text for _, text in questions)
    # convert is placed once quantized.bc is in: no hbm / board result, no deployment
    for needless in ("Result of hbm", "Result of board", "compile script", "colour space",
                     "Board input", "board's post-processing"):
        assert needless not in shown
    case = case_of(folder)
    assert case["stages"]["qat_bc"] == {"metric": "mAP", "value": 0.449}
    assert case["consistency_levels_tried"] == [] and case["language"] == "en"


def test_board_problem_in_chinese_with_a_compile_script(tmp_path):
    folder = tmp_path / "board"
    (folder / "deploy").mkdir(parents=True)
    (folder / "deploy" / "build_hbm.py").write_text(COMPILE_SCRIPT)
    columns = 64
    child = spawn(folder, env={"LANG": "zh_CN.UTF-8"}, columns=columns)
    child.logfile_read = transcript = io.StringIO()
    play(child, [("type", "简述异常现象", "板端 mAP 0.30，x86 仿真 0.443，qat.pt 0.446"),
                 ("menu", "问题是怎样观察到的？", SPACE + ENTER),
                 ("enter", "各阶段用什么指标评测？", "mAP"),
                 ("enter", "qat.pt 的评测结果？", "0.446"),
                 ("type", "qat.bc 的评测结果？", ""),                              # not evaluated
                 ("type", "quantized.bc 的评测结果？", "0.445"),
                 ("enter", "hbm (x86) 的评测结果？", "0.443"),
                 ("enter", "板端的评测结果？", "0.3"),
                 # the script is found and read before any deployment question
                 ("says", "deploy/build_hbm.py（在案例目录中找到）", ""),
                 ("help", "训练时输入的颜色空间？", "训练数据送进模型时的通道格式"),  # rgb
                 # the script's normalisation is offered for training, never taken silently
                 ("enter", "训练归一化的 mean", "123.675, 116.28, 103.53"),
                 ("enter", "训练归一化的 std", "58.395, 57.12, 57.375"),
                 ("menu", "板端输入来自哪里？", ENTER),                             # pyramid
                 # an odd NV12 size is refused where it is typed, by the audit's rule
                 ("type", "板端输入高度？", "541"),
                 ("says", "答案无效：NV12 输入的高度必须是偶数：541 是奇数", ""),
                 ("type", "板端输入高度？", "544"),
                 ("type", "板端输入宽度？", "960"),
                 ("type", "板端后处理与训练/评测时完全相同吗？", "否")])
    child.expect_exact("结论：用户侧适配")
    # every failed check is named, and fixing it is the next step
    child.expect_exact("部署检查未通过（1 项）")
    child.expect_exact("前后处理节点或后处理解码与板端不符：后处理：训练为评测所用的解码，板端为它自己的解码")
    child.expect_exact("下一步：修正以上这一项，然后重新评测")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    text = transcript.getvalue()
    questions = asked(text)
    assert len(questions) <= BOARD_WITH_SCRIPT_QUESTIONS, questions
    shown = " ".join(q for _, q in questions)
    for told_by_the_script in ("编译脚本的路径", "训练时输入的 layout", "板端输入的格式"):
        assert told_by_the_script not in shown
    # text wraps at the terminal's width, wide characters counted as two columns
    lines = _ANSI.sub("", text).replace("\r", "").split("\n")
    assert max(display_width(line) for line in lines) <= columns, \
        max(lines, key=display_width)
    case = case_of(folder)
    assert case["language"] == "zh"
    assert case["deploy"]["script"] == "deploy/build_hbm.py"
    assert case["deploy"]["board"]["color"] == "nv12" and case["deploy"]["train"]["layout"] == "NCHW"
    source = (folder / "case.yaml").read_text()
    assert "color: nv12  # deploy/build_hbm.py:11 insert_image_convert" in source
