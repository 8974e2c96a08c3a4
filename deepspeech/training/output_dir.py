"""``train.output_dir``: a run's folder, never silently shared with another run.

Hours of training are not lost to a forgotten ``train.output_dir``: a run refuses a
folder that holds another run's results unless told to replace them, and replaces
them only once it is about to write its own. A resume continues its own run, so it
may write into the folder of the checkpoint it resumes (or into an empty one), not
into a third run's. Temporary files that a killed write left there are removed.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from deepspeech.config import Config
from deepspeech.errors import ConfigError
from deepspeech.files import unfinished_writes
from deepspeech.training.checkpoint import MODEL_CARD

log = logging.getLogger(__name__)

RESULT_FILES = ("last.pt", "best.pt", "metrics.jsonl")
"""A run's results in ``train.output_dir``: another run there needs ``overwrite``."""
RUN_FILES = (*RESULT_FILES, MODEL_CARD, "config.yaml", "tensorboard")
"""Everything a run writes there; a new run removes it first, so that the two never mix."""


def previous_run(config: Config, is_main: bool, overwrite: bool) -> list[str]:
    """The files of another run in ``train.output_dir`` that this run will replace;
    refuses, naming them, unless ``overwrite``."""
    output_dir = Path(config.train.output_dir)
    if not is_main or _continues_own_run(config):
        return []
    present = [name for name in RUN_FILES if (output_dir / name).exists()]
    results = [name for name in present if name in RESULT_FILES]
    if results and not overwrite:
        held = f"{output_dir} already holds a run ({', '.join(results)})"
        if config.train.resume:
            raise ConfigError(
                f"train.output_dir: {held}, not the one train.resume={config.train.resume} "
                f"continues; resume into {Path(config.train.resume).parent} or an empty "
                f"folder, or replace that run with deepspeech train --overwrite")
        raise ConfigError(
            f"train.output_dir: {held}; continue it with "
            f"train.resume={output_dir / 'last.pt'}, train elsewhere with another "
            f"train.output_dir, or replace it with deepspeech train --overwrite")
    return present


def _continues_own_run(config: Config) -> bool:
    """A resume into the folder of the checkpoint it resumes."""
    if not config.train.resume:
        return False
    output_dir = Path(config.train.output_dir)
    return output_dir.is_dir() and output_dir.samefile(Path(config.train.resume).parent)


def prepare_output_dir(output_dir: Path, replaced: list[str]) -> None:
    """Remove another run's files (saying so) and what killed writes left behind."""
    if replaced:
        log.warning("replacing the earlier run in %s (%s)", output_dir, ", ".join(replaced))
    for name in replaced:
        path = output_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    for name in RUN_FILES:
        for leftover in unfinished_writes(output_dir / name):
            log.warning("removing %s, left by a write that was killed", leftover)
            leftover.unlink()
    output_dir.mkdir(parents=True, exist_ok=True)
