"""``deepspeech doctor``: each check uses what it checks, and a broken library is one
named problem with its fix, never a traceback that hides the other checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepspeech import doctor
from deepspeech.doctor import ABSENT, OK, PROBLEM, Doctor, Finding, declared_pins, report

ROOT = Path(__file__).resolve().parents[1]
UNDEFINED = "torch_exception_get_what_without_backtrace"


def _doctor_with(tmp_path: Path, broken: dict[str, str], *args: str) -> tuple[int, str, str]:
    """``deepspeech doctor`` with the packages in ``broken`` replaced by ones whose import
    raises the given code's exception, as a mismatched binary build does."""
    shadow = tmp_path / "shadow"
    for package, raising in broken.items():
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text(raising)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "deepspeech", "doctor", "--no-mpi", *args],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return done.returncode, done.stdout, done.stderr


def _by_name(output: str) -> dict[str, dict]:
    report_ = json.loads(output)
    return {check["name"]: check for check in report_["checks"]}


def test_everything_needed_works_in_the_test_environment() -> None:
    findings = Doctor(run_mpi=False).run()
    problems = [f for f in findings if f.status == PROBLEM]
    assert problems == []
    names = {f.name for f in findings}
    assert {"python", "torch", "torchaudio", "cuda", "triton", "espeak-ng", "beam decoder",
            "soundfile", "safetensors", "disk"} <= names
    detail = {f.name: f.detail for f in findings}
    assert "OGG/Opus, SPHERE, MP3 written and read back" in detail["soundfile"]
    assert "ARPA LM decodes" in detail["beam decoder"]


def test_the_pins_come_from_the_installed_metadata() -> None:
    pins = declared_pins()
    assert set(pins) >= {"torch", "torchaudio"}
    assert all(version[0].isdigit() for version in pins.values())


def test_a_torchaudio_built_for_another_torch_is_named_with_the_pair_to_install(tmp_path) -> None:
    library = ".../torchaudio/lib/libtorchaudio.so"
    # As torchaudio does: the loader's error, with the symbol, is the cause of its own.
    status, output, errors = _doctor_with(tmp_path, {"torchaudio": (
        f"try:\n    raise OSError('{library}: undefined symbol: {UNDEFINED}')\n"
        f"except OSError as e:\n"
        f"    raise OSError('Could not load this library: {library}') from e\n")}, "--json")
    assert status == 1, output + errors
    checks = _by_name(output)
    torchaudio = checks["torchaudio"]
    assert torchaudio["status"] == PROBLEM
    assert f"undefined symbol: {UNDEFINED}" in torchaudio["detail"]
    pins = declared_pins()
    assert f"pip install torch=={pins['torch']} torchaudio=={pins['torchaudio']}" in torchaudio["fix"]
    assert checks["beam decoder"]["status"] == PROBLEM
    assert "needs torchaudio" in checks["beam decoder"]["detail"]
    # The rest is still checked and reported.
    for name in ("torch", "espeak-ng", "soundfile", "disk"):
        assert checks[name]["status"] == OK, checks[name]


def test_a_torch_that_does_not_import_is_reported_and_the_rest_still_checked(tmp_path) -> None:
    status, output, errors = _doctor_with(
        tmp_path, {"torch": "raise ImportError('libtorch_cpu.so: cannot open shared object')\n"},
        "--json")
    assert status == 1, output + errors
    checks = _by_name(output)
    assert checks["torch"]["status"] == PROBLEM
    assert "cannot open shared object" in checks["torch"]["detail"]
    assert checks["torchaudio"]["status"] == PROBLEM
    assert checks["soundfile"]["status"] == OK
    assert checks["disk"]["status"] == OK


def test_the_report_puts_each_fix_under_its_problem() -> None:
    text = report([Finding("torch", OK, "2.14.1"),
                   Finding("cuda", ABSENT, "no GPU"),
                   Finding("torchaudio", PROBLEM, "does not load", "pip install x==1")])
    lines = text.splitlines()
    assert lines[0].split() == ["ok", "torch", "2.14.1"]
    assert lines[2].startswith("PROBLEM  torchaudio")
    assert lines[3].split() == ["fix:", "pip", "install", "x==1"]
    assert lines[-1] == "1 problem(s)"


def test_too_little_disk_for_the_cache_is_a_problem(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DEEPSPEECH_CACHE_DIR", str(tmp_path / "not" / "made" / "yet"))
    monkeypatch.setattr(doctor, "MIN_FREE_GIB", float("inf"))
    checker = Doctor(run_mpi=False)
    checker.disk()
    (finding,) = checker.findings
    assert finding.status == PROBLEM and str(tmp_path / "not" / "made" / "yet") in finding.detail
    assert "DEEPSPEECH_CACHE_DIR" in finding.fix


@pytest.mark.mpi
def test_two_ranks_all_reduce_through_the_package() -> None:
    done = subprocess.run([sys.executable, "-m", "deepspeech", "doctor", "--json"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    mpi = _by_name(done.stdout)["mpi"]
    assert mpi["status"] == OK and "2 ranks on this host all-reduced" in mpi["detail"]


@pytest.mark.mpi
def test_a_launch_that_hangs_is_ended_and_named(monkeypatch) -> None:
    monkeypatch.setattr(doctor, "MPI_TIMEOUT_S", 0.01)
    checker = Doctor()
    checker.mpi()
    (finding,) = checker.findings
    assert finding.status == PROBLEM and "did not finish" in finding.detail


def test_other_commands_point_to_the_doctor_when_the_install_is_broken(tmp_path) -> None:
    shadow = tmp_path / "shadow" / "torchaudio"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(f"raise OSError('undefined symbol: {UNDEFINED}')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "deepspeech", "data", "stats", "x.jsonl"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    assert "the installation is broken" in done.stderr and UNDEFINED in done.stderr
    assert "deepspeech doctor" in done.stderr and "Traceback" not in done.stderr
