"""``qcdoctor compare LEFT RIGHT``: two tensor dumps (files or folders), output by output."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.errors import EXIT_OK, QcdoctorError

ABOUT = dict(help="compare two tensor dumps (files or folders of outputs)")


def declare(command) -> None:
    command.add_argument("left", help="dump file or folder (.npy, .pt, .bin)")
    command.add_argument("right", help="the reference dump file or folder")
    command.add_argument("--decimals", type=int, default=4,
                         help="values differing beyond this many decimals count as mismatched")
    command.add_argument("--dtype", default=None,
                         help="dtype of raw .bin files without a sidecar (default float32)")
    command.add_argument("--format", choices=("md", "json"), default="md")
    command.add_argument("--trust-pickles", action="store_true")


def run(args, parser) -> int:
    import json

    from qcdoctor.collectors.dumps import compare_paths
    from qcdoctor.engine.commands.progress import Progress
    if not 0 <= args.decimals <= 12:
        raise QcdoctorError("--decimals takes 0 to 12", fix="e.g. --decimals 4")
    results = compare_paths(Path(args.left), Path(args.right), args.decimals, args.dtype,
                            args.trust_pickles, Progress())
    if args.format == "json":
        from qcdoctor.engine.matching.jsonfmt import without_nonfinite
        print(json.dumps([without_nonfinite(r) for r in results], indent=2, default=str,
                         allow_nan=False))
        return EXIT_OK
    print(f"| output | cosine | L1 | max abs | rel | mismatch@{args.decimals} | identical |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if "missing" in r:
            print(f"| {r['output']} | missing on the {r['missing']} side | | | | | |")
        elif r["shape_mismatch"] and r["cosine"] is None:
            print(f"| {r['output']} | shapes {r['shape_left']} vs {r['shape_right']} | | | | | no |")
        else:
            print(f"| {r['output']} | {r['cosine']:.6f} | {r['l1']:.6g} | {r['max_abs']:.6g} | "
                  f"{r['rel']:.3g} | {r['mismatch_ratio']:.4%} | {'yes' if r['identical'] else 'no'} |")
    return EXIT_OK
