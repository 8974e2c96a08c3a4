"""A job in which rank 1 fails; rank 0 must end it with a named error.

    _worker_faults.py SCENARIO ALGORITHM TIMEOUT
SCENARIO: hang (rank 1 sleeps), kill (rank 1 SIGKILLs itself), exit (os._exit(3)),
freeze (rank 1 is stopped, SIGSTOP, while it waits for rank 0, and stays stopped until
the launcher ends the job after rank 0's timeout: SIGCONT and SIGTERM, which training
survives, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import torch
from mpi4py import MPI

from deepspeech.distributed import abort_on_error, allreduce

comm = MPI.COMM_WORLD
scenario, algorithm, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])

if scenario == "freeze" and comm.Get_rank() == 1:
    signal.signal(signal.SIGTERM, lambda number, frame: None)  # as training's stop handler

with abort_on_error(comm):
    x = torch.ones(1 << 18)
    for step in range(5):
        if step == 3 and scenario == "freeze":
            if comm.Get_rank() == 0:  # late, so that rank 1 waits when it is stopped
                time.sleep(1.0)
            else:
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGSTOP)).start()
        elif step == 3 and comm.Get_rank() == 1:
            print(f"rank 1: {scenario} at step {step}", flush=True)
            if scenario == "hang":
                time.sleep(3600)
            elif scenario == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif scenario == "exit":
                os._exit(3)
        allreduce(x, "mean", comm, algorithm=algorithm, timeout_s=timeout)
    print("finished without noticing the failure", flush=True)
