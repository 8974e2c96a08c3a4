# Requeue on Slurm's warning and resume after it: sourced by scripts/slurm/mpirun.sbatch.
#
# Slurm sends the batch shell the --signal warning (USR1) before the time limit, and when a
# higher-priority job preempts this one (SlurmctldParameters=preempt_send_user_signal). The
# script passes it to the training, which saves last.pt after the step in flight and exits
# with status 130. The script then requeues its own job: a batch script that ends in its
# grace time ends COMPLETED and never runs again. Started again (SLURM_RESTART_COUNT > 0),
# the job adds train.resume=<train.output_dir>/last.pt to its own command line, so the user
# edits nothing. The decision to resume is the scheduler's (it restarted this job), so it
# lives here: `deepspeech train` keeps one meaning of train.resume (a file) and still
# refuses, on a first start, a folder that holds another run.
#
# Only a stop that the warning asked for requeues: a refused checkpoint, a config error or
# a failed rank ends the job with its status and the training's reason in the log, never
# in a loop of restarts.

# slurm_resume_args TRAIN_ARGS...: the overrides that continue this job's own run, one a
# line: none on a first start or where no last.pt was written yet.
slurm_resume_args() {
    [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || return 0
    local last
    last="$(train_output_dir "$@")/last.pt"
    if [ -f "$last" ]; then
        echo "train.resume=$last"
        echo "train.init_from="   # resumed weights, not the first start's
        echo "mpirun.sbatch: restart ${SLURM_RESTART_COUNT} of job ${SLURM_JOB_ID}: resuming from $last" >&2
    else
        echo "mpirun.sbatch: restart ${SLURM_RESTART_COUNT} of job ${SLURM_JOB_ID}: no $last yet, starting anew" >&2
    fi
}

# train_output_dir -c CONFIG [--overwrite] [key=value ...]: train.output_dir as the
# training resolves it (the YAML file, then the overrides).
train_output_dir() {
    python - "$@" <<'EOF'
import argparse
import sys

from deepspeech.config import load_config

parser = argparse.ArgumentParser()
parser.add_argument("-c", "--config", required=True)
parser.add_argument("--overwrite", action="store_true")
parser.add_argument("overrides", nargs="*")
args = parser.parse_args(sys.argv[1:])
print(load_config(args.config, args.overrides, check_files=False).train.output_dir)
EOF
}

# slurm_requeue_if_warned STATUS: after the training stopped on the warning (status 130),
# or was warned before it started, put this job back in the queue and end; else return.
slurm_requeue_if_warned() {
    [ -n "${slurm_warned:-}" ] && [ "$1" = 130 ] || return 0
    echo "mpirun.sbatch: stopped on the warning with last.pt saved; requeueing job $SLURM_JOB_ID" >&2
    trap '' TERM   # the requeue's own TERM to this shell
    scontrol requeue "$SLURM_JOB_ID" && exit 0
    echo "mpirun.sbatch: job $SLURM_JOB_ID cannot be requeued (--no-requeue, or JobRequeue=0):" \
        "resubmit it with train.resume=<train.output_dir>/last.pt" >&2
    exit 130
}

# slurm_lost_node STATUS LOG: fail where mpirun (its output in LOG) lost a node's daemon,
# which Open MPI 5.0's mpirun may answer with status 0 as if the job had succeeded; name
# the node.
slurm_lost_node() {
    local nodes
    nodes="$(sed -n 's/^ *Remote daemon:.* on node \([^ ]*\).*/\1/p' "$2" | sort -u | xargs)"
    [ -n "$nodes" ] || return 0
    echo "mpirun.sbatch: mpirun lost its daemon on $nodes (status $1): the job failed" >&2
    return $(( $1 ? $1 : 1 ))
}
