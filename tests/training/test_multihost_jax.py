"""JAX multi-host training as 2 processes on 127.0.0.1, host loss, and run-state names.

The multi-process test runs tests/support/multihost_worker.py twice per host, each child under a
hard `timeout -s KILL` (tests/support/multihost.py): a peer killed mid-run must end the survivor
within 30 s with one line and an intact checkpoint, and both hosts then resume from it to the
same weights.
"""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import keras
import numpy as np
import pytest

from keras_vit.training import checkpointing
from keras_vit.data import pipeline
from keras_vit.training.parallel import hosts, run_agreement
from keras_vit.data.sources import from_arrays
from tests.support import multihost
from tests.support.runs import save_teacher

BACKEND = keras.backend.backend()
LIMIT = 240  # seconds any child may live


@pytest.mark.skipif(BACKEND != "jax", reason="JAX multi-process: runs under KERAS_BACKEND=jax")
def test_jax_two_hosts_lose_one_then_resume_to_the_same_weights(tmp_path):
    """Host 1 is SIGKILLed after step 5; host 0's next all-reduce fails ("Connection reset by
    peer"): it exits 75 within 30 s, not after host_timeout (300 s), with one line naming host
    1 and the state of step 4 intact; both hosts then resume from it to the same weights. The
    student learns from a teacher (of another width and resolution) all along."""
    distill = dict(teacher=save_teacher(tmp_path), distill="soft")
    run_dir = tmp_path / "run"
    procs = multihost.jax_hosts(run_dir, str(tmp_path), limit=LIMIT, checkpoint_every=2, host_timeout=300,
                                extra={1: ["kill_at=5"]}, **distill)
    (lost_code, lost_out), = multihost.finish(procs[1:])  # host 1 is gone ...
    killed = time.monotonic()
    (code, out), = multihost.finish(procs[:1], deadline=killed + 60)  # ... and host 0 must follow
    assert lost_code in (-signal.SIGKILL, 128 + signal.SIGKILL), lost_out[-3000:]
    assert code == hosts.EXIT_HOST_LOST and time.monotonic() - killed < 30, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("keras-vit:")]
    assert len(lines) == 1 and "host 1 (" in lines[0] and "Connection reset by peer" in lines[0], out[-3000:]
    assert "the last good state is step 4" in lines[0] and "rerun the same command" in lines[0]
    saved = json.loads((run_dir / "checkpoint" / "state.json").read_text())
    assert saved["step"] == 4 and (run_dir / "checkpoint" / saved["weights"]).exists()

    results = multihost.finish(multihost.jax_hosts(run_dir, str(tmp_path), limit=LIMIT, checkpoint_every=2,
                                                   host_timeout=6, **distill))
    assert [code for code, _ in results] == [0, 0], results[0][1][-3000:] + results[1][1][-3000:]
    first, second = (json.loads((tmp_path / f"host-{i}.json").read_text()) for i in range(2))
    assert first["resumed_from"] == saved["step"] and first["steps"] == second["steps"] > saved["step"]
    assert first["first"] == second["first"] and first["sum"] == second["sum"]  # the same weights on both hosts
    assert np.isfinite(first["val_loss"]) and first["top1"] == second["top1"]
    assert first["loss"] == second["loss"] and sorted(first["distilled"]) == ["distill_loss", "label_loss"]
    assert first["distilled"] == second["distilled"]  # the losses of the global batch on both hosts
    for values in first["distilled"].values():
        assert len(values) == len(first["loss"]) and np.isfinite(values).all()


def test_run_state_naming_a_file_out_of_its_folder_is_refused(tmp_path):
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "x.weights.h5").write_bytes(b"precious")
    folder = tmp_path / "run" / "checkpoint"
    folder.mkdir(parents=True)
    for name in ("../../other_run/x.weights.h5", "/etc/passwd", "step-1.weights.h5/../x", 3):
        (folder / "state.json").write_text(json.dumps({"step": 1, "weights": name}))
        state = checkpointing.RunState(str(tmp_path / "run"), None)
        state.tidy()  # deletes nothing: the state to keep is not proven
        with pytest.raises(ValueError, match="only a plain 'step-N.weights.h5'"):
            state.restore(None)
    assert (other / "x.weights.h5").read_bytes() == b"precious"


def test_padded_validation_is_static_and_counts_only_real_examples():
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 255, (70, 8, 8, 3), dtype=np.uint8), rng.integers(0, 3, 70)
    source = from_arrays(((images[:10], labels[:10]), (images[10:], labels[10:])))  # 60 validation examples
    whole = [b for b in pipeline.eval_dataset(source, 8, 16, pad_to_multiple=2).as_numpy_iterator()]
    assert [len(b[0]) for b in whole] == [16] * 4 and sum(b[2].sum() for b in whole) == 60
    parts = [list(pipeline.eval_dataset(source, 8, 8, part=(2, i)).as_numpy_iterator()) for i in range(2)]
    assert [len(p) for p in parts] == [4, 4]  # every host the same number of full batches
    for k in range(4):  # host parts make up the one-process global batches
        joined = np.concatenate([parts[0][k][0], parts[1][k][0]])
        np.testing.assert_array_equal(joined, whole[k][0])
        np.testing.assert_array_equal(np.concatenate([parts[0][k][2], parts[1][k][2]]), whole[k][2])
    # metrics count the real examples only: all-correct predictions on padding-free data = 1.0
    metric = keras.metrics.SparseCategoricalAccuracy()
    for x, y, w in whole:
        metric.update_state(y, keras.ops.one_hot(y, 3), sample_weight=w)
    assert float(metric.result()) == 1.0


def test_host_parts_of_the_training_stream_make_up_the_one_process_batches():
    rng = np.random.default_rng(1)
    images, labels = rng.integers(0, 255, (40, 8, 8, 3), dtype=np.uint8), rng.integers(0, 3, 40)
    source = from_arrays(((images, labels), (images[:4], labels[:4])))
    aug = pipeline.Augmentation(8)
    # deterministic: tf.data's parallel map may otherwise reorder examples across batches
    one = pipeline.train_dataset(source, aug, 8, seed=3, start=8, deterministic=True).take(3)
    parts = [pipeline.train_dataset(source, aug, 4, seed=3, start=4, part=(2, i), deterministic=True).take(3)
             for i in range(2)]
    for whole, first, second in zip(one.as_numpy_iterator(), *(p.as_numpy_iterator() for p in parts)):
        np.testing.assert_array_equal(np.concatenate([first[0], second[0]]), whole[0])
        np.testing.assert_array_equal(np.concatenate([first[1], second[1]]), whole[1])


def test_separate_run_folders_are_refused_in_one_line(tmp_path):
    """Host 1 with a run folder of its own: it does not find the chief's token, and the hosts
    resuming from different steps refuse before any of them loads weights."""
    chief, other = tmp_path / "chief", tmp_path / "other"
    tokens = []
    host0 = hosts.Watch(str(chief), 0, 2, timeout=1, allgather=lambda token: tokens.append(token) or [token, 7])
    os.makedirs(host0.folder)
    host0._check_shared()  # the chief sees its own token
    host1 = hosts.Watch(str(other), 1, 2, timeout=1, allgather=lambda token: [tokens[0], token])
    os.makedirs(host1.folder)
    with pytest.raises(ValueError, match="is not shared: host 1 does not see what host 0 wrote"):
        host1._check_shared()
    (chief / "checkpoint").mkdir()
    (chief / "checkpoint" / "state.json").write_text(json.dumps({"step": 6, "weights": "step-6.weights.h5", "fingerprint": {}}))
    plan = SimpleNamespace(gather=lambda row: [row, [0, 0]])  # host 1 sees no saved state
    with pytest.raises(ValueError, match=r"different saved states .*process 0: step 6 \(state [0-9a-f]{8}\), process 1: no saved state"):
        run_agreement.check_same_state(plan, str(chief))


def test_padding_of_validation_batches_is_not_counted_by_the_compiled_metrics():
    """One process, 2 devices pads each validation batch; the compiled model must score
    the padded stream as the unpadded one (main counted the padding as examples)."""
    from keras_vit import VisionTransformer
    from keras_vit.training import engine, recipe, trainer

    rng = np.random.default_rng(2)
    images, labels = rng.integers(0, 255, (31, 8, 8, 3), dtype=np.uint8), rng.integers(0, 3, 31)
    source = from_arrays(((images[:10], labels[:10]), (images[10:], labels[10:])))  # 21 validation examples
    model = VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                              input_shape=(8, 8, 3), classes=3, classifier_activation="softmax", weights=None)
    config = recipe("digits", batch_size=8, image_size=8, label_smoothing=0.0)  # sparse labels
    setup = trainer.Classification(model).setup(config, source, engine.make_augmentation(config))
    train_model = setup.train_model
    train_model.compile(optimizer="sgd", **setup.compile)  # the loss and metrics of a training run
    plain = train_model.evaluate(pipeline.eval_dataset(source, 8, 8), verbose=0, return_dict=True)
    padded = train_model.evaluate(pipeline.eval_dataset(source, 8, 8, pad_to_multiple=2), verbose=0, return_dict=True)
    assert padded["accuracy"] == pytest.approx(plain["accuracy"], abs=1e-6)
    assert padded["top5"] == pytest.approx(plain["top5"], abs=1e-6)
    assert padded["loss"] == pytest.approx(plain["loss"], rel=0.02)


WATCHED = """
import os, sys, threading
from types import SimpleNamespace
from keras_vit.training.parallel import hosts
run_dir, count = sys.argv[1], int(sys.argv[2])
plan = SimpleNamespace(process_index=0, processes=count, allgather=None)
with hosts.watching(run_dir, plan, timeout=float(sys.argv[3])):
    print("watching", flush=True)
    os.read(os.pipe()[0], 1)  # blocked for good, as in a collective whose peer is gone
"""


@pytest.mark.parametrize("count, code, line", [
    (1, hosts.EXIT_TERMINATED, "stopped by SIGTERM (no clean stop within 3 s)"),
    (2, hosts.EXIT_TERMINATED, "stopped by SIGTERM before a save all hosts could join"),
])
def test_sigterm_ends_a_stuck_process_in_bounded_time_with_one_line(tmp_path, count, code, line):
    env = {**os.environ, "KERAS_BACKEND": BACKEND}
    proc = subprocess.Popen([sys.executable, "-c", WATCHED, str(tmp_path), str(count), "3" if count == 1 else "60"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "watching\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code
    assert [x for x in err.splitlines() if x.startswith("keras-vit:")] == [
        f"keras-vit: {line}; host 0 of {count} stops: no step checkpoint had been saved yet (a rerun starts over)."]
    if count > 1:  # the peers learn it from the heartbeat and stop too
        assert json.loads((tmp_path / "hosts" / "host-0.json").read_text())["status"] == "terminated"


JAX_RESET = ("UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc:538] Read error "
             "[127.0.0.1]:42674: Connection reset by peer")  # what the survivor of test_jax_two_hosts_... gets
TORCH_RESET = ("[third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:16789: Connection reset "
               "by peer. This is typically caused by a remote worker hanging or bugs in the application.")


class _Clock:
    """`time` for `hosts` with no waiting: `sleep` moves `monotonic` on and calls `tick(now)`."""

    def __init__(self, tick):
        self.now, self.tick = 1000.0, tick

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        self.tick(self.now)


def _fail(tmp_path, monkeypatch, capsys, error, peer_beats=False):
    """Host 0 of 2 (host_timeout 300 s: a heartbeat every 10 s) fails with `error`; host 1's
    heartbeat stays at beat 3, or moves every 10 s. `(exit code, seconds it took, its line)`."""
    watch = hosts.Watch(str(tmp_path), 0, 2, timeout=300)
    os.makedirs(watch.folder)

    def beat(now, count=[3]):
        if peer_beats and now % 10 < 1:
            count[0] += 1
        hosts._write(watch._path(1), {"index": 1, "host": "peer", "pid": 7, "beat": count[0], "status": "running"})

    clock = _Clock(beat)
    beat(clock.now)
    monkeypatch.setattr(hosts, "time", clock)
    monkeypatch.setattr(hosts.os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    with pytest.raises(SystemExit) as exited:
        watch.fail(f"{type(error).__name__}: {error}", 1, hosts.peer_gone(error))
    return exited.value.code, clock.now - 1000.0, capsys.readouterr().err.strip()


@pytest.mark.parametrize("message", [JAX_RESET, TORCH_RESET])
def test_a_broken_connection_names_the_silent_peer_within_15_s_not_host_timeout(tmp_path, monkeypatch, capsys, message):
    code, took, line = _fail(tmp_path, monkeypatch, capsys, RuntimeError(message))
    assert code == hosts.EXIT_HOST_LOST and took <= 17
    assert line.startswith("keras-vit: host 1 (peer, pid 7) sent no heartbeat for 16 s (lost) (here: RuntimeError: ")
    assert "Connection reset by peer" in line and line.endswith("host 0 of 2 stops: no step checkpoint had been saved "
                                                                "yet (a rerun starts over).")


def test_a_broken_connection_with_every_peer_beating_still_ends_this_host(tmp_path, monkeypatch, capsys):
    code, took, line = _fail(tmp_path, monkeypatch, capsys, RuntimeError(TORCH_RESET), peer_beats=True)
    assert code == hosts.EXIT_HOST_LOST and took <= 17
    assert line.startswith("keras-vit: a peer's connection broke (here: RuntimeError: [third_party/gloo")


def test_another_error_with_a_silent_peer_still_waits_for_host_timeout(tmp_path, monkeypatch, capsys):
    """Without a broken connection a silent peer may only be slow: lost after host_timeout."""
    code, took, line = _fail(tmp_path, monkeypatch, capsys, RuntimeError("INTERNAL: an all-reduce timed out"))
    assert not hosts.peer_gone(RuntimeError("DEADLINE_EXCEEDED: barrier timed out"))
    assert code == hosts.EXIT_HOST_LOST and 300 < took <= 302
    assert line.startswith("keras-vit: host 1 (peer, pid 7) sent no heartbeat for 301 s (lost) (here: RuntimeError: "
                           "INTERNAL: an all-reduce timed out)")
