"""``deepspeech serve``'s page in headless Chromium (Playwright): a chosen file's transcript.

Needs Debian's chromium (``/usr/bin/chromium``; Playwright's own browsers are not
downloaded here) and skips with the reason where it is absent.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import soundfile as sf

from deepspeech.inference.recognizer import Recognizer
from deepspeech.inference.transcribe import transcribe_file

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("DEEPSPEECH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SMALL = ["model.conv.channels=[4,4]", "model.conv.kernels=[[11,5],[11,5]]",
         "model.rnn.layers=2", "model.rnn.hidden=24"]


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if not os.access(CHROMIUM, os.X_OK):
        return (f"no Chromium at {CHROMIUM} (apt-get install chromium, or set "
                "DEEPSPEECH_CHROMIUM); Playwright's own browsers are not used")
    return None


@pytest.fixture(scope="module")
def served(tmp_path_factory, random_recognizer, save_random_checkpoint, serving):
    """``(port, checkpoint)`` of a server of a random bidirectional model."""
    folder = tmp_path_factory.mktemp("page")
    checkpoint = save_random_checkpoint(random_recognizer(SMALL), folder / "model.pt")
    with serving(checkpoint, folder / "server.log", ["--low-confidence", "0.7"]) as port:
        yield port, checkpoint


@pytest.fixture(scope="module")
def page(served):
    missing = _browser_missing()
    if missing:
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        page = browser.new_page(viewport={"width": 1000, "height": 700})
        page.goto(f"http://127.0.0.1:{served[0]}/")
        yield page
        browser.close()


def test_a_chosen_file_shows_its_transcript_with_marked_words(served, page, tmp_path):
    rng = np.random.default_rng(1)
    clip = tmp_path / "clip.wav"
    sf.write(clip, (0.3 * rng.standard_normal(24000)).astype(np.float32), 16000)
    expected = transcribe_file(Recognizer.from_checkpoint(served[1], device="cpu"), str(clip))

    page.wait_for_function("document.getElementById('model').textContent.includes('live:')")
    assert page.input_value("#threshold") == "0.7"  # the server's --low-confidence
    page.set_input_files("#file", str(clip))
    page.wait_for_function("document.getElementById('status').textContent.includes('done')",
                           timeout=30_000)
    words = page.locator("#transcript .word")
    assert words.all_text_contents() == [w.word for w in expected.words]
    assert page.inner_text("#transcript").split() == expected.text.split()
    assert "1.50 s of audio" in page.inner_text("#summary")
    # Every word's tooltip tells its times and confidence; the marked ones are below 0.7.
    titles = [words.nth(i).get_attribute("title") for i in range(words.count())]
    assert all(" s · confidence " in title for title in titles)
    confidences = [getattr(w, "confidence", None) for w in expected.words]
    marked = page.locator("#transcript .word.low").count()
    assert marked == sum(c is not None and c < 0.7 for c in confidences)


def test_a_file_the_server_refuses_shows_its_error(page, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not audio at all\n")
    page.set_input_files("#file", str(notes))
    page.wait_for_function("document.getElementById('status').className === 'error'")
    assert "415: notes.txt: unreadable audio" in page.inner_text("#status")
    assert json.loads(page.evaluate("JSON.stringify(document.title)")) == "deepspeech serve"
