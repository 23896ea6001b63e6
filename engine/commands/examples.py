"""``qcdoctor examples``: the example cases bundled with qcdoctor (examples/<name>/case.yaml),
listed, copied to start a case from, or opened for a triage."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from qcdoctor.errors import EXIT_OK, QcdoctorError
from qcdoctor.package_data import package_files

ABOUT = dict(help="list the bundled example cases, or copy one")


def declare(command) -> None:
    command.add_argument("--copy", nargs=2, metavar=("NAME", "DIR"),
                         help="copy the example NAME into DIR (new or empty) to start a case "
                              "from")


def run(args, parser) -> int:
    if args.copy:
        copy_example(*args.copy)
        return EXIT_OK
    names = example_names()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name.ljust(width)}  {example_title(name)}")
    return EXIT_OK


def _root():
    return package_files("qcdoctor.examples")


def example_names() -> list[str]:
    return sorted(p.name for p in _root().iterdir()
                  if p.is_dir() and (p / "case.yaml").is_file())


def example_title(name: str) -> str:
    from qcdoctor.package_data import safe_yaml
    data = safe_yaml((_root() / name / "case.yaml").read_text(encoding="utf-8")) or {}
    return str(data.get("title", ""))


@contextmanager
def example_path(name: str):
    """A real folder for the example (extracted if the package is zipped)."""
    if name not in example_names():
        raise QcdoctorError(f"no example named {name!r}",
                            fix=f"choose one of: {', '.join(example_names())}")
    root = _root()
    if isinstance(root, Path):
        yield root / name
        return
    from importlib import resources
    with resources.as_file(root / name) as path:
        yield Path(path)


def copy_example(name: str, folder: str) -> Path:
    """The example copied into ``folder`` (created, or empty): a case to start from."""
    import shutil
    target = Path(folder)
    if target.exists() and not target.is_dir():
        raise QcdoctorError("not a folder", file=folder, fix="give a new folder to copy into")
    if target.is_dir() and any(target.iterdir()):
        raise QcdoctorError("this folder is not empty: nothing is copied over your files",
                            file=folder, fix=f"give a new folder, e.g. {target / name}")
    with example_path(name) as source:
        shutil.copytree(source, target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return target
