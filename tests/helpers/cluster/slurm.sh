#!/usr/bin/env bash
# A real SLURM cluster of K nodes on this one host, for the test suite (tests/e2e/test_slurm.py) or by hand:
#
#   tests/helpers/cluster/slurm.sh start DIR [K]   install (if missing), configure and start munge, slurmctld and
#                                                  K slurmd (nodes n1..nK); prints the SLURM_CONF to export
#   tests/helpers/cluster/slurm.sh stop DIR        stop exactly the daemons `start` started (their pids in DIR)
#
# Debian's packages (slurmctld slurmd slurm-client munge, 22.05), no systemd, no cgroups: processes are
# tracked by /proc and every node is 127.0.0.1 with a port of its own (Debian builds MULTIPLE_SLURMD).
# Needs Linux, root and apt-get; exits 3 with the reason where one is missing (the tests then skip).
set -euo pipefail

command=${1:-}
dir=${2:-}
nodes=${3:-2}
if [[ -z $command || -z $dir ]]; then
    echo "usage: $0 start DIR [K] | stop DIR" >&2
    exit 2
fi
dir=$(realpath -m "$dir")

stop() {
    # first the jobs, so that no job step outlives its slurmd
    if [[ -f $dir/slurm.conf && -f $dir/pids/slurmctld.pid ]]; then
        SLURM_CONF=$dir/slurm.conf scancel --full --quiet --partition=local 2>/dev/null || true
        for _ in $(seq 100); do
            [[ -z $(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.1
        done
    fi
    local pids=()
    for pidfile in "$dir"/pids/*.pid; do
        [[ -f $pidfile ]] && pids+=("$(cat "$pidfile")")
    done
    if ((${#pids[@]})); then
        kill "${pids[@]}" 2>/dev/null || true
        for _ in $(seq 100); do
            alive=0
            for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
            ((alive)) || break
            sleep 0.1
        done
        kill -9 "${pids[@]}" 2>/dev/null || true
    fi
    rm -f "$dir"/pids/*.pid
    [[ -f $dir/munge_dir ]] && rm -rf "$(cat "$dir/munge_dir")" "$dir/munge_dir"
    return 0
}

if [[ $command == stop ]]; then
    stop
    exit 0
fi
[[ $command == start ]] || { echo "unknown command $command: start or stop" >&2; exit 2; }

[[ $(uname) == Linux ]] || { echo "not Linux" >&2; exit 3; }
[[ $(id -u) == 0 ]] || { echo "not root (slurmd runs jobs as their users)" >&2; exit 3; }
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || { echo "SLURM is not installed and there is no apt-get" >&2; exit 3; }
    packages=(slurmctld slurmd slurm-client munge)
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null; } \
        || { echo "apt-get could not install ${packages[*]}" >&2; exit 3; }
fi

mkdir -p "$dir"/{pids,state,log} && chmod 755 "$dir"
for i in $(seq "$nodes"); do mkdir -p "$dir/spool/n$i"; done

# munge, with its own key, socket and pid (a munge the system runs is left alone), in a directory of /tmp
# that the munge user can reach (DIR may sit under a directory only root may enter)
munge=$(mktemp -d /tmp/slurm-munge.XXXXXX)
echo "$munge" > "$dir/munge_dir"
head -c 1024 /dev/urandom > "$munge/munge.key"
chown -R munge: "$munge" && chmod 700 "$munge" && chmod 400 "$munge/munge.key"
runuser -u munge -- /usr/sbin/munged --key-file="$munge/munge.key" --socket="$munge/socket" \
    --pid-file="$munge/munged.pid" --log-file="$munge/munged.log" --seed-file="$munge/seed" --force
cp "$munge/munged.pid" "$dir/pids/munged.pid"

port=$((17000 + RANDOM % 20000))
cores=$(getconf _NPROCESSORS_ONLN)  # (nproc would obey OMP_NUM_THREADS)
{
    echo "ClusterName=local"
    echo "SlurmctldHost=localhost(127.0.0.1)"
    echo "SlurmctldPort=$port"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$munge/socket"
    echo "CredType=cred/munge"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    echo "ReturnToService=2"
    echo "JobRequeue=1"
    echo "MinJobAge=3600"  # finished jobs stay visible to scontrol for an hour
    echo "KillWait=10"  # SIGTERM, then SIGKILL this many seconds later (scancel, time limits)
    echo "OverTimeLimit=0"
    echo "SchedulerParameters=sched_interval=1"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    for i in $(seq "$nodes"); do
        echo "NodeName=n$i NodeAddr=127.0.0.1 NodeHostname=localhost Port=$((port + i))" \
            "SocketsPerBoard=1 CoresPerSocket=$cores ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$dir/slurm.conf"
export SLURM_CONF=$dir/slurm.conf

slurmctld -i -f "$SLURM_CONF"
for _ in $(seq 50); do [[ -s $dir/slurmctld.pid ]] && break; sleep 0.1; done
cp "$dir/slurmctld.pid" "$dir/pids/slurmctld.pid"
for i in $(seq "$nodes"); do
    slurmd -N "n$i" -f "$SLURM_CONF"
    for _ in $(seq 50); do [[ -s $dir/slurmd-n$i.pid ]] && break; sleep 0.1; done
    cp "$dir/slurmd-n$i.pid" "$dir/pids/slurmd-n$i.pid"
done

# ready when every node is idle
for _ in $(seq 100); do
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)
    [[ $idle -ge $nodes ]] && break
    sleep 0.2
done
if [[ $idle -lt $nodes ]]; then
    echo "the nodes did not come up: $(sinfo -N 2>&1 | tr '\n' ' '); see $dir/log" >&2
    stop
    exit 1
fi
echo "SLURM_CONF=$SLURM_CONF"
