# Sourced (bash): a real SLURM cluster from Debian's packages, entirely under one directory,
# with auth/none (no munge), non-default ports and no file outside that directory.
#   slurm_up DIR NODES [PREFIX [GPUS]]  starts slurmctld and NODES slurmd. Without PREFIX, one
#       node "localhost" on 127.0.0.1; with PREFIX, node i runs in network namespace PREFIX-hi
#       (tests/multihost/netns.sh, created by the caller) and the controller on PREFIX-h1.
#       GPUS (at most 4): each node has that many GPUs as a GRES, character devices standing in
#       for them (a partition whose nodes have GPUs, as sinfo, the scheduler and the job see it).
#   slurm DIR CMD...             runs a client command (sbatch, squeue, ...) against it.
#   slurm_wait_job DIR JOBID SECONDS  polls until the job has left the queue; cancels it and
#       fails when it is still there after SECONDS.
#   slurm_job_field DIR JOBID FIELD   one field of scontrol show job (JobState, ExitCode...).
#   slurm_down DIR               cancels every job, stops the daemons it started by PID.
. "$(dirname "${BASH_SOURCE[0]}")/../multihost/netns.sh"

# A TCP port nobody listens on, so several clusters (and a real SLURM) can share a machine.
slurm_free_port() { # FROM
    local port=$1
    while ss -Htan | awk '{print $4}' | grep -q ":$port\$"; do port=$((port + 1)); done
    echo "$port"
}

slurm_write_conf() { # DIR NODES PREFIX GPUS
    local dir=$1 nodes=$2 prefix=$3 gpus=$4 ctld_port slurmd_port i gres=""
    [ -z "$gpus" ] || { echo "GresTypes=gpu"; gres=" Gres=gpu:$gpus"; }
    ctld_port=$(slurm_free_port $((20000 + RANDOM % 20000)))
    slurmd_port=$(slurm_free_port $((ctld_port + 1)))
    if [ -n "$prefix" ]; then
        echo "SlurmctldHost=$prefix-h1($(netns_address 1))"
    else
        echo "SlurmctldHost=localhost"
        # Loopback only: the test cluster must not listen on the machine's real interfaces.
        echo "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
    fi
    cat <<EOF
ClusterName=dptrain
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# A requeued job waits cred_expire seconds (default 120) before it may start again.
AuthInfo=cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
InactiveLimit=0
MinJobAge=600
KillWait=5
EOF
    if [ -n "$prefix" ]; then
        for i in $(seq "$nodes"); do
            echo "NodeName=$prefix-h$i NodeAddr=$(netns_address "$i") CPUs=2$gres"
        done
    else
        echo "NodeName=localhost NodeAddr=127.0.0.1 CPUs=2$gres"
    fi
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
}

# Replaces the (sub)shell with CMD where node i's daemons and the clients run: a namespace
# host, or here.
slurm_on() { # DIR NODE_INDEX CMD...
    local prefix
    prefix=$(cat "$1/prefix")
    shift
    local i=$1
    shift
    if [ -n "$prefix" ]; then netns_run "$prefix-h$i" "$@"; else exec "$@"; fi
}

slurm() { # DIR CMD...
    (
        export SLURM_CONF=$1/etc/slurm.conf
        slurm_on "$1" 1 "${@:2}"
    )
}

slurm_node_name() { # DIR NODE_INDEX
    local prefix
    prefix=$(cat "$1/prefix")
    if [ -n "$prefix" ]; then echo "$prefix-h$2"; else echo localhost; fi
}

# Starts a daemon in the foreground (-D) as our child, so its PID is known and reaped here
# (the subshell becomes the daemon).
slurm_start_daemon() { # DIR NODE_INDEX NAME CMD...
    local dir=$1 i=$2 name=$3
    shift 3
    (slurm_on "$dir" "$i" "$@" -D -f "$dir/etc/slurm.conf") >"$dir/log/$name.stderr" 2>&1 &
    echo "$!" >>"$dir/run/pids"
}

slurm_up() { # DIR NODES [PREFIX [GPUS]]
    local dir=$1 nodes=$2 prefix=${3:-} gpus=${4:-} i node
    mkdir -p "$dir"/{etc,state,spool,tmp,run,log}
    echo "$prefix" >"$dir/prefix"
    slurm_write_conf "$dir" "$nodes" "$prefix" "$gpus" >"$dir/etc/slurm.conf"
    # A GPU GRES needs a device file each (a bare Count is reported as 0): any that exists.
    [ -z "$gpus" ] || printf 'Name=gpu File=%s\n' /dev/null /dev/zero /dev/full /dev/urandom | head -n "$gpus" >"$dir/etc/gres.conf"
    slurm_start_daemon "$dir" 1 slurmctld slurmctld -c
    for i in $(seq "$nodes"); do
        node=$(slurm_node_name "$dir" "$i")
        mkdir -p "$dir/spool/$node" "$dir/tmp/$node"
        slurm_start_daemon "$dir" "$i" "slurmd-$node" slurmd -N "$node"
    done
    slurm_wait_idle "$dir" "$nodes" 30
}

slurm_wait_idle() { # DIR NODES SECONDS
    local deadline=$((SECONDS + $3))
    while [ "$(slurm "$1" sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" -lt "$2" ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "slurm: $2 node(s) not idle after $3 s; logs:" >&2
            tail -n 20 "$1"/log/* >&2
            return 1
        fi
        sleep 0.2
    done
}

slurm_wait_job() { # DIR JOBID SECONDS
    local deadline=$((SECONDS + $3))
    while [ -n "$(slurm "$1" squeue -h -j "$2" 2>/dev/null)" ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "slurm: job $2 still queued or running after $3 s; cancelling it" >&2
            slurm "$1" scancel "$2"
            return 1
        fi
        sleep 0.5
    done
}

slurm_job_field() { # DIR JOBID FIELD
    slurm "$1" scontrol show job "$2" | tr ' ' '\n' | sed -n "s/^$3=//p"
}

# A PID is ours while it is alive (not a zombie) and still one of our daemons.
slurm_pid_alive() { # PID DIR
    { ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" &&
        tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF "$2/etc/slurm.conf"; } 2>/dev/null
}

slurm_down() { # DIR
    local dir=$1 pid deadline
    [ -f "$dir/run/pids" ] || return 0
    slurm "$dir" scancel --partition=debug 2>/dev/null
    deadline=$((SECONDS + 10))
    while [ -n "$(slurm "$dir" squeue -h 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.2
    done
    # slurmd's first, then the controller (its PID is the first line).
    for pid in $(tac "$dir/run/pids"); do
        slurm_pid_alive "$pid" "$dir" && kill "$pid"
        deadline=$((SECONDS + 10))
        while slurm_pid_alive "$pid" "$dir" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
        slurm_pid_alive "$pid" "$dir" && kill -9 "$pid"
        wait "$pid" 2>/dev/null
    done
    rm -f "$dir/run/pids"
}
