"""``deepspeech train``: one process, or one per MPI rank / torchrun worker."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from deepspeech.config import Config, load_config
from deepspeech.errors import AudioError, naming_resource_failures, own_message

# Loggers whose lines every rank of a data-parallel run would print alike.
# Not deepspeech.data.dataset: the files a rank skips as it meets them are its own.
SAME_ON_EVERY_RANK = ("deepspeech.data.corpus", "deepspeech.data.probe",
                      "deepspeech.training.data_parallel", "deepspeech.training.init_from",
                      "deepspeech.training.resume")


@contextlib.contextmanager
def _naming_audio_met_in_training(config: Config, last: Path) -> Iterator[None]:
    """An audio file that stops a run once training reads it: how to find all such
    files at once and where to continue.

    Before step one only headers are checked (seconds for a large corpus); a file whose
    body is truncated or holds NaN samples is met when a loader decodes it.
    """
    try:
        yield
    except AudioError as exc:
        manifests = " ".join([config.data.train_manifest, *(m.manifest for m in config.data.mix)])
        resume = f"train.resume={last} " if last.exists() else ""
        raise AudioError(f"{own_message(exc)}\n  met while training: `deepspeech data check "
                         f"{manifests}` decodes every file and lists all such (--write-clean "
                         f"also writes manifests without them); fix or remove them and run "
                         f"again, or run again with {resume}data.bad_input=skip to leave out "
                         f"each such file as training meets it") from None


def _train(args: argparse.Namespace) -> int:
    from deepspeech.device import select_device
    from deepspeech.training.launch import launched_local_rank, launched_world_size, make_sync
    from deepspeech.training.stop import StopRequests
    from deepspeech.training.trainer import TrainResult, train

    def exit_status(result: TrainResult) -> int:
        return 130 if result.stopped_by else 0 if result.steps else 1

    config = load_config(args.config, args.overrides)
    last = Path(config.train.output_dir) / "last.pt"
    advice = "lower data.num_workers, train.batch_size or data.max_duration"
    with StopRequests() as stop:
        # Deterministic mode sums fixed-point gradients even on one process, so that
        # -n 1 gives the bits that -n 2 and -n 4 give.
        if launched_world_size() == 1 and not config.distributed.deterministic:
            with naming_resource_failures(advice, last), \
                    _naming_audio_met_in_training(config, last):
                return exit_status(train(config, overwrite=args.overwrite, stop=stop))
        from deepspeech.distributed import abort_on_error

        device = select_device(config.train.device, launched_local_rank())
        sync = make_sync(config.distributed, str(device))
        if sync.rank != 0:
            # Every rank reads the same manifests and builds the same model: rank 0 says
            # what that finds, once. A rank's own warnings (a stop signal) still show.
            for name in SAME_ON_EVERY_RANK:
                logging.getLogger(name).setLevel(logging.ERROR)
        # An error on one rank (a bad file, a dead peer, a mismatched config) ends every
        # rank with that message instead of leaving the others waiting.
        with abort_on_error(sync.comm), naming_resource_failures(advice, last), \
                _naming_audio_met_in_training(config, last):
            result = train(config, sync, overwrite=args.overwrite, stop=stop)
            sync.close()
        return exit_status(result)


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
