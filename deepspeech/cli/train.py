"""``deepspeech train``: one process, or one per MPI rank / torchrun worker."""

from __future__ import annotations

import argparse

from deepspeech.config import load_config


def _train(args: argparse.Namespace) -> int:
    from deepspeech.recognizer import select_device
    from deepspeech.training.launch import launched_local_rank, launched_world_size, make_sync
    from deepspeech.training.trainer import train

    config = load_config(args.config, args.overrides)
    # Deterministic mode sums fixed-point gradients even on one process, so that
    # -n 1 gives the bits that -n 2 and -n 4 give.
    if launched_world_size() == 1 and not config.distributed.deterministic:
        return 0 if train(config, overwrite=args.overwrite).steps else 1
    from deepspeech.distributed import abort_on_error

    device = select_device(config.train.device, launched_local_rank())
    sync = make_sync(config.distributed, str(device))
    # An error on one rank (a bad file, a dead peer, a mismatched config) ends every
    # rank with that message instead of leaving the others waiting.
    with abort_on_error(sync.comm):
        steps = train(config, sync, overwrite=args.overwrite).steps
        sync.close()
    return 0 if steps else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``train``."""
    parser = subparsers.add_parser(
        "train", help="train a model from a YAML config",
        description="Train from a YAML config; key=value arguments override it "
                    "(e.g. train.epochs=3 model.rnn.hidden=512). Under mpirun or torchrun "
                    "each process trains one data-parallel shard.")
    parser.add_argument("-c", "--config", required=True, help="YAML config file")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run already in train.output_dir (without it, "
                             "a new run refuses a folder that holds checkpoints or metrics)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    parser.set_defaults(handler=_train)
