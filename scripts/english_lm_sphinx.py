"""General-English 3-gram LM from pocketsphinx's US English model, as ARPA for the decoder.

Usage: python scripts/english_lm_sphinx.py OUT_DIR [--lm-bin FILE]

Writes OUT_DIR/sphinx_en_us.arpa and, beside it, OUT_DIR/sphinx_en_us.LICENSE: the
model is Carnegie Mellon University's, under a BSD 2-clause license whose notice must
go with every copy (docs/RECIPES.md, "A general-English LM from pocketsphinx"). The
model (`en-us.lm.bin`, 72.5k words, 2.05M bigrams, 1.67M trigrams) comes from the
pinned pocketsphinx wheel, downloaded once into OUT_DIR/downloads with pip (only the
wheel's files are read; pocketsphinx is not installed), or from FILE (Debian's
pocketsphinx-en-us installs it as /usr/share/pocketsphinx/model/en-us/en-us.lm.bin).

Pocketsphinx's own ARPA converters abort on this model (deepspeech/lm/sphinx.py says
why), so the project reads the binary itself. Words the English acoustic model cannot
spell (279: hyphenated compounds such as `e-mail`, spelled letters such as `a.`) are
removed and every context's probabilities renormalized over the rest
(deepspeech/lm/ngrams.py); `<unk>` is added, never predicted.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from deepspeech.data.text import ENGLISH_CHARACTERS
from deepspeech.lm import write_arpa
from deepspeech.lm.ngrams import restrict_vocabulary
from deepspeech.lm.sphinx import read_sphinx_lm

WHEEL = "pocketsphinx==5.1.1"
MEMBER = "pocketsphinx/model/en-us/en-us.lm.bin"
SPELLABLE = set(ENGLISH_CHARACTERS) - {" "}


def fail(message: str) -> None:
    sys.exit(f"english_lm_sphinx.py: {message}")


def download(folder: Path) -> tuple[Path, Path]:
    """The model and license files of the pinned wheel, extracted into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    model, license_file = folder / "en-us.lm.bin", folder / "LICENSE"
    if model.is_file() and license_file.is_file():
        return model, license_file
    found = sorted(folder.glob("pocketsphinx-5.1.1-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary", ":all:", "-d", str(folder), WHEEL], check=True)
        found = sorted(folder.glob("pocketsphinx-5.1.1-*.whl"))
    if not found:
        fail(f"pip download {WHEEL} left no wheel in {folder}")
    with zipfile.ZipFile(found[-1]) as wheel:
        license_name = next(n for n in wheel.namelist() if n.endswith("licenses/LICENSE"))
        license_file.write_bytes(wheel.read(license_name))
        with wheel.open(MEMBER) as source, model.open("wb") as target:
            shutil.copyfileobj(source, target)
    return model, license_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--lm-bin", type=Path, metavar="FILE",
                        help="an installed en-us.lm.bin instead of the wheel's")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.lm_bin:
        model_file = args.lm_bin
        license_file = Path("/usr/share/doc/pocketsphinx-en-us/copyright")
        if not license_file.is_file():
            fail(f"{license_file} missing: the model's license must go with the ARPA; "
                 "install Debian's pocketsphinx-en-us or use the wheel (no --lm-bin)")
    else:
        model_file, license_file = download(args.out_dir / "downloads")
    model = read_sphinx_lm(model_file)
    english = restrict_vocabulary(model, lambda word: set(word) <= SPELLABLE)
    output = args.out_dir / "sphinx_en_us.arpa"
    write_arpa(english, output)
    shutil.copyfile(license_file, args.out_dir / "sphinx_en_us.LICENSE")
    counts = ", ".join(f"{n}-grams: {len(t)}" for n, t in enumerate(english.orders, start=1))
    removed = len(set(model.vocab) - set(english.vocab))
    print(f"{output}: {counts}; {removed} words the "
          f"English vocabulary cannot spell removed; {output.stat().st_size / 1e6:.1f} MB "
          f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
