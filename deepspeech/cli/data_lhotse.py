"""``deepspeech data import lhotse`` and ``deepspeech data export lhotse``.

``import`` and ``export`` take the format as their sub-command, so that another format
(NeMo tarred, WebDataset...) is one more sub-command beside ``lhotse``.
"""

from __future__ import annotations

import argparse

from deepspeech.arguments import output_folder, positive_int
from deepspeech.data.prepare.common import BAD_INPUT


def _import(args: argparse.Namespace) -> int:
    from deepspeech.data.lhotse.importer import import_lhotse

    print(import_lhotse(args.inputs, args.output, split=args.split, root=args.root,
                        bad_input=args.bad_input).format())
    return 0


def _export(args: argparse.Namespace) -> int:
    from deepspeech.data.lhotse.exporter import export_lhotse

    print(export_lhotse(args.manifest, args.output, workers=args.workers).format())
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``import`` and ``export`` to ``deepspeech data``'s sub-commands."""
    importing = commands.add_parser("import", help="a manifest from another toolkit's "
                                    "manifests (lhotse)")
    formats = importing.add_subparsers(dest="format", metavar="format", required=True)
    lhotse = formats.add_parser(
        "lhotse", help="lhotse cuts, recordings + supervisions, or a Shar folder",
        description="Write OUTPUT/NAME.jsonl from lhotse manifests: cut files (cuts.jsonl.gz), "
        "a recordings file with its supervisions file, or a Shar folder (its audio written out "
        "under OUTPUT/shar/). One utterance per cut with one supervision; every cut the "
        "manifest cannot hold (several supervisions, MixedCut, URL or command sources, channel "
        "selection, transforms) is named with its file, line and id.")
    lhotse.add_argument("inputs", nargs="+", metavar="CUTS",
                        help="cut file(s), RECORDINGS SUPERVISIONS, or a Shar folder")
    lhotse.add_argument("-o", "--output", required=True, type=output_folder,
                        help="folder for the manifest")
    lhotse.add_argument("--split", help="manifest name (default: the cuts or supervisions "
                        "file's name without .jsonl.gz, or the Shar folder's)")
    lhotse.add_argument("--root", help="folder that relative audio paths are resolved against "
                        "(default: the working folder, as lhotse does)")
    lhotse.add_argument("--bad-input", choices=BAD_INPUT, default="error",
                        help="error: name every cut that cannot be imported and write nothing; "
                             "skip: leave them out with one warning naming them")
    lhotse.set_defaults(handler=_import)

    exporting = commands.add_parser("export", help="a manifest as another toolkit's "
                                    "manifests (lhotse)")
    formats = exporting.add_subparsers(dest="format", metavar="format", required=True)
    lhotse = formats.add_parser(
        "lhotse", help="recordings, supervisions and cuts (.jsonl.gz) that lhotse loads",
        description="Write OUTPUT/recordings.jsonl.gz, supervisions.jsonl.gz and cuts.jsonl.gz: "
        "one recording per audio file (rate, samples and channels from its header), one "
        "supervision and one cut per utterance, extra fields as the supervision's custom.")
    lhotse.add_argument("manifest", help="JSON Lines manifest")
    lhotse.add_argument("-o", "--output", required=True, type=output_folder,
                        help="folder for the lhotse manifests")
    lhotse.add_argument("--workers", type=positive_int, default=8,
                        help="threads reading audio headers")
    lhotse.set_defaults(handler=_export)
