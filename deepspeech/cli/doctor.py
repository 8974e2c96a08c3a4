"""``deepspeech doctor``: what is installed, what is broken, and what to do about it."""

from __future__ import annotations

import argparse
import json


def _doctor(args: argparse.Namespace) -> int:
    from deepspeech.doctor import Doctor, as_json, has_problem, report

    findings = Doctor(run_mpi=not args.no_mpi).run()
    print(json.dumps(as_json(findings), indent=2) if args.json else report(findings))
    return 1 if has_problem(findings) else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``doctor``."""
    parser = subparsers.add_parser(
        "doctor", help="check the installation: torch and torchaudio, GPUs, MPI, audio, decoder",
        description="Checks what deepspeech needs, each by using it; exit status 1 when "
                    "something needed is broken, with what to do on the line below it.")
    parser.add_argument("--json", action="store_true", help="the findings as JSON")
    parser.add_argument("--no-mpi", action="store_true",
                        help="skip launching 2 MPI ranks (inside an allocation that forbids it)")
    parser.set_defaults(handler=_doctor)
