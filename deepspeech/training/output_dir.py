"""``train.output_dir``: a run's folder, never silently shared with another run.

Hours of training are not lost to a forgotten ``train.output_dir``: a new run refuses
a folder that holds another run's results unless told to replace them, and replaces
them only once it is about to write its own.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from deepspeech.config import Config
from deepspeech.errors import ConfigError
from deepspeech.training.checkpoint import MODEL_CARD

log = logging.getLogger(__name__)

RESULT_FILES = ("last.pt", "best.pt", "metrics.jsonl")
"""A run's results in ``train.output_dir``: a new run there needs ``overwrite``."""
RUN_FILES = (*RESULT_FILES, MODEL_CARD, "config.yaml", "tensorboard")
"""Everything a run writes there; a new run removes it first, so that the two never mix."""


def previous_run(config: Config, is_main: bool, overwrite: bool) -> list[str]:
    """The files of an earlier run in ``train.output_dir`` that this new run will replace;
    refuses, naming them, unless ``overwrite``. A resume continues its own folder."""
    output_dir = Path(config.train.output_dir)
    if config.train.resume or not is_main:
        return []
    present = [name for name in RUN_FILES if (output_dir / name).exists()]
    results = [name for name in present if name in RESULT_FILES]
    if results and not overwrite:
        raise ConfigError(
            f"train.output_dir: {output_dir} already holds a run ({', '.join(results)}); "
            f"continue it with train.resume={output_dir / 'last.pt'}, train elsewhere with "
            f"another train.output_dir, or replace it with deepspeech train --overwrite")
    return present


def remove_run(output_dir: Path, names: list[str]) -> None:
    """Remove an earlier run's files, saying so."""
    if names:
        log.warning("replacing the earlier run in %s (%s)", output_dir, ", ".join(names))
    for name in names:
        path = output_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
