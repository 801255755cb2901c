"""Many hosts, one run: a lost peer or SIGTERM ends every process in bounded time.

A collective waits forever for a process that is gone. While a run is watched (`watching`),
each of its processes writes a heartbeat to the shared run folder (`RUN/hosts/host-I.json`,
a counter every `timeout / 10` seconds) and a thread reads its peers'. When a peer's counter
has not moved for `timeout` seconds, or it wrote that it stopped or failed, this process
prints one line naming that host and what is left to resume from, and exits with
`EXIT_HOST_LOST` at once (from the thread: the main one may be stuck in a collective). The
checkpoint files are replaced only by atomic renames, so the last good state stays intact.

A collective that fails because a peer's connection broke ("Connection reset by peer", Gloo,
NCCL, gRPC: `PEER_GONE`) needs no `timeout`: the peer is gone, not slow. The process that got
the error names the peer whose heartbeat stops within `PEER_GONE_BEATS` heartbeat intervals
(at most 15 s) and exits with `EXIT_HOST_LOST`; its last heartbeat ("failed") stops the other
processes within one more interval. A peer that falls silent without breaking a connection
still counts as lost only after `timeout`.

SIGTERM (Slurm's `scancel`, TPU maintenance, `docker stop`): one process saves its state at
the end of the step, then exits with `EXIT_TERMINATED`; on several processes a save would
need every peer, so each exits at once without writing (its peers then stop too); the state
of the last step checkpoint is the one to resume from. A process that does not get there
within `timeout` seconds is ended by the thread all the same.

The run folder must be shared by all hosts: on JAX a token the chief writes is read back by
every process at the start (and the processes compare the step they resume from), and a process that does not find it refuses in one line.
"""

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import uuid

import keras

from keras_vit import run_folder

EXIT_HOST_LOST = 75  # EX_TEMPFAIL: rerun (resume) once the hosts are back
EXIT_TERMINATED = 143  # 128 + SIGTERM
FOLDER = run_folder.HOSTS
# What a collective's error says (lower case) when a peer's connection broke: the peer is gone.
PEER_GONE = ("connection reset by peer", "connection closed by peer", "closed by remote peer", "broken pipe",
             "socket closed")
PEER_GONE_BEATS = 1.5  # heartbeat intervals a peer may be silent after such an error before it counts as gone


def peer_gone(error):
    """Whether the exception `error` says that a peer's connection broke (`PEER_GONE`)."""
    text = str(error).lower()
    return any(words in text for words in PEER_GONE)


def _write(path, payload):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        json.dump(payload, handle)
    os.replace(tmp, path)


def _read(path):
    """A heartbeat's JSON, or None (missing, being replaced, or not a regular file: a FIFO
    would block the watchdog)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


class Watch(keras.callbacks.Callback):
    """This process's heartbeat, its watch over its peers and its SIGTERM handling.

    `state`: the run's `checkpointing.RunState` (what to resume from; saved on SIGTERM).
    """

    def __init__(self, run_dir, index=0, count=1, timeout=300, state=None, allgather=None):
        super().__init__()
        if not timeout > 0:
            raise ValueError(f"host_timeout={timeout} must be > 0 seconds.")
        self.folder = os.path.join(run_dir, FOLDER)
        self.index, self.count, self.timeout = index, count, float(timeout)
        self.interval = min(10.0, self.timeout / 10)  # between heartbeats
        self.state = state
        self.allgather = allgather
        self.beats = 0
        self.terminated_at = None
        self._stop = threading.Event()
        self._thread = None
        self._previous_handler = self._previous_wakeup = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        os.set_inheritable(self._wake_read, False)

    # -- heartbeats -------------------------------------------------------------------
    def _path(self, index):
        return os.path.join(self.folder, f"host-{index}.json")

    def _beat(self, status="running", why=""):
        self.beats += 1
        _write(self._path(self.index), run_folder.signed({"index": self.index, "host": socket.gethostname(),
                                                          "pid": os.getpid(), "beat": self.beats, "status": status,
                                                          "why": why}))

    def _resume_hint(self):
        good = None if self.state is None else self.state.good_path
        if good is None:
            return "no step checkpoint had been saved yet (a rerun starts over)"
        where = " on every host" if self.count > 1 else ""
        return f"the last good state is step {self.state.good_step} ({good}); rerun the same command{where} to resume"

    def _exit(self, code, what, status="exited"):
        """One line, a last heartbeat saying why (the peers then stop too), and exit now."""
        if self.count > 1:
            self._beat(status, what)
        print(f"keras-vit: {what}; host {self.index} of {self.count} stops: {self._resume_hint()}.",
              file=sys.stderr, flush=True)
        os._exit(code)

    def _run(self):
        interval = self.interval
        seen = {peer: (None, time.monotonic()) for peer in range(self.count) if peer != self.index}
        while True:
            # the C-level signal handler writes SIGTERM to the pipe even while the main
            # thread is stuck in a collective, where the Python handler never runs
            if select.select([self._wake_read], [], [], interval)[0]:
                if signal.SIGTERM in os.read(self._wake_read, 64) and self.terminated_at is None:
                    self.terminated_at = time.monotonic()
            if self._stop.is_set():
                return
            now = time.monotonic()
            if self.terminated_at is not None and self.count > 1:  # a save needs every peer
                self._exit(EXIT_TERMINATED, "stopped by SIGTERM before a save all hosts could join", "terminated")
            if self.terminated_at is not None and now - self.terminated_at > self.timeout:
                self._exit(EXIT_TERMINATED, f"stopped by SIGTERM (no clean stop within {self.timeout:g} s)")
            if self.count > 1:
                self._beat()
            lost = self._lost_peer(seen, now)
            if lost:
                self._exit(EXIT_HOST_LOST, lost[2])

    def _lost_peer(self, seen, now, silence=None):
        """Updates `seen` ({peer: (last beat, since)}) from the peers' heartbeats; `(peer,
        status, line)` of the first peer that stopped ("failed", "exited", "terminated") or fell
        silent for `silence` seconds (`timeout` if None: "lost"), else None."""
        silence = self.timeout if silence is None else silence
        for peer, (last, since) in list(seen.items()):
            report = _read(self._path(peer)) or {}
            name = f"host {peer} ({report.get('host', '?')}, pid {report.get('pid', '?')})"
            status = report.get("status")
            if status == "finished":
                del seen[peer]
            elif status not in (None, "running"):
                return peer, status, f"{name} {status}: {report.get('why', '')}"
            elif report.get("beat") != last:
                seen[peer] = (report.get("beat"), now)
            elif now - since > silence:
                return peer, "lost", f"{name} {'never started' if last is None else f'sent no heartbeat for {now - since:.0f} s (lost)'}"
        return None

    def fail(self, line, code, gone=False):
        """This process failed with `line` (several processes): tells the peers, then exits
        with one line, naming the cause where a peer was lost or stopped (the collective a
        peer leaves fails on the others, or waits for it). `gone`: the error said a peer's
        connection broke (`peer_gone`): the lost peer is the one silent for `PEER_GONE_BEATS`
        heartbeat intervals, and this process exits with `EXIT_HOST_LOST` by then."""
        self.stop("failed", line)
        patience = PEER_GONE_BEATS * self.interval if gone else self.timeout
        started = time.monotonic()
        seen = {peer: (None, started) for peer in range(self.count) if peer != self.index}
        while seen and time.monotonic() - started <= patience + 1:
            lost = self._lost_peer(seen, time.monotonic(), patience)
            if lost and lost[1] in ("lost", "terminated"):
                self._exit(EXIT_HOST_LOST, f"{lost[2]} (here: {line})", "failed")
            if lost and not gone:  # the peers know and stop: this process's own error is the news
                break
            if lost:  # a peer that stopped too (its connection broke as well): look on for the one gone
                del seen[lost[0]]
            time.sleep(min(1.0, self.interval))
        if gone:
            self._exit(EXIT_HOST_LOST, f"a peer's connection broke (here: {line})", "failed")
        print(f"keras-vit: host {self.index} of {self.count} failed: {line}", file=sys.stderr, flush=True)
        os._exit(code)

    # -- shared folder ----------------------------------------------------------------
    def _check_shared(self):
        """Every process reads the token the chief wrote (a collective: `allgather`)."""
        path = os.path.join(self.folder, "run.json")
        token = uuid.uuid4().int % 2**31
        if self.index == 0:
            _write(path, run_folder.signed({"token": token}))
        token = self.allgather(token)[0]
        deadline = time.monotonic() + min(10.0, self.timeout)
        while (_read(path) or {}).get("token") != token:
            if time.monotonic() > deadline:
                raise ValueError(
                    f"{os.path.dirname(self.folder)} is not shared: host {self.index} does not see what host 0 "
                    "wrote there. Every host must use the same run folder on shared storage (separate run "
                    "folders are not supported)."
                )
            time.sleep(0.2)

    # -- lifetime ---------------------------------------------------------------------
    def start(self):
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._previous_wakeup = signal.set_wakeup_fd(self._wake_write, warn_on_full_buffer=False)
        if self.count > 1:
            os.makedirs(self.folder, exist_ok=True)
            self._beat()
            if self.allgather is not None:
                self._check_shared()
        self._thread = threading.Thread(target=self._run, name="keras-vit-hosts", daemon=True)
        self._thread.start()

    def stop(self, status="finished", why=""):
        self._stop.set()
        if self._thread is not None:
            os.write(self._wake_write, b"\0")
            self._thread.join()
            self._thread = None
            if self.count > 1:
                self._beat(status, why)
        if self._previous_handler is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None
        if self._wake_read is not None:
            os.close(self._wake_read)
            os.close(self._wake_write)
            self._wake_read = self._wake_write = None

    def _on_sigterm(self, signum, frame):
        if self.terminated_at is None:
            self.terminated_at = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self.terminated_at is None or self.count > 1:  # several: the thread stops this process
            return
        saved = self.state is not None and self.state.save_now()
        what = "state saved" if saved else "no state saved"
        self._exit(EXIT_TERMINATED, f"stopped by SIGTERM ({what})")


@contextlib.contextmanager
def watching(run_dir, plan, timeout, state=None):
    """Watches the run of `plan` (see the module docstring) while the block runs; yields the
    `Watch` callback to give `fit`."""
    watch = Watch(run_dir, plan.process_index, plan.processes, timeout, state, plan.allgather)
    try:
        watch.start()
        yield watch
    except BaseException as error:
        line = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if plan.processes > 1:  # exiting normally would wait for the peers at the backend's shutdown
            watch.fail(line, 2 if isinstance(error, ValueError) else 1, peer_gone(error))
        watch.stop("failed", line)
        raise
    watch.stop()
