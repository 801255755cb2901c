"""Runs of several processes on 127.0.0.1 for the multi-host tests: free ports, the launch
variables of a JAX host, and children that each run under a hard `timeout -s KILL` in a session
of their own, which `finish` ends (only those sessions) if one outlives its limit."""

import os
import signal
import socket
import subprocess
import sys
import time

SUPPORT = os.path.dirname(os.path.abspath(__file__))
JAX_WORKER = os.path.join(SUPPORT, "multihost_worker.py")


def free_ports(count=1):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start(command, env, limit):
    """`command` under `timeout -s KILL limit` in a new session, its output (stdout and
    stderr) piped; `proc.deadline`: when `finish` ends it at the latest."""
    proc = subprocess.Popen(["timeout", "-s", "KILL", str(limit), *command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    proc.deadline = time.monotonic() + limit + 10
    return proc


def finish(procs, deadline=None):
    """`[(exit code, output)]` of `procs`; a process still running at its deadline (or at
    `deadline`, a `time.monotonic()` value) is killed with its session."""
    results = []
    for proc in procs:
        until = proc.deadline if deadline is None else min(deadline, proc.deadline)
        try:
            out, _ = proc.communicate(timeout=max(0.1, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
        results.append((proc.returncode, out))
    return results


def jax_env(port, hosts, index, backend="jax"):
    """The environment of JAX host `index` of `hosts` meeting at 127.0.0.1:`port` (one CPU device
    each; no launch variables for one host, or for another backend)."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1",
           "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=1".strip()}
    for name in ("JOB_ADDRESSES", "NUM_PROCESSES", "PROCESS_ID"):
        env.pop(f"KERAS_DISTRIBUTION_{name}", None)
    if hosts > 1:
        env.update(KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}", KERAS_DISTRIBUTION_NUM_PROCESSES=str(hosts),
                   KERAS_DISTRIBUTION_PROCESS_ID=str(index))
    return env


def jax_hosts(run_dir, out, hosts=2, limit=300, backend="jax", extra=None, **overrides):
    """`hosts` processes of multihost_worker.py training in `run_dir` (`overrides`: KEY=VALUE
    arguments; `extra`: {host index: [more arguments]}); host I reports to `out`/host-I.json."""
    (port,) = free_ports()
    return [
        start([sys.executable, JAX_WORKER, str(run_dir), os.path.join(out, f"host-{index}.json"),
               *(f"{k}={v}" for k, v in overrides.items()), *(extra or {}).get(index, [])],
              jax_env(port, hosts, index, backend), limit)
        for index in range(hosts)
    ]
