"""JAX multi-host training as 2 processes on 127.0.0.1, host loss, and run-state names.

The multi-process test runs tests/support/multihost_worker.py twice per host, each child under a
hard `timeout -s KILL`: a peer killed mid-run must end the survivor in bounded time with one
line and an intact checkpoint, and both hosts then resume from it to the same weights.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import keras
import numpy as np
import pytest

from keras_vit.training import checkpointing, pipeline
from keras_vit.training.parallel import hosts, run_agreement
from keras_vit.training.data import from_arrays

BACKEND = keras.backend.backend()
WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support", "multihost_worker.py")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(run_dir, out, hosts=2, limit=300, **overrides):
    port = _free_port()
    procs = []
    for index in range(hosts):
        env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1",
               "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
               "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{port}", "KERAS_DISTRIBUTION_NUM_PROCESSES": str(hosts),
               "KERAS_DISTRIBUTION_PROCESS_ID": str(index)}
        command = [sys.executable, WORKER, str(run_dir), str(out / f"host-{index}.json"),
                   *(f"{k}={v}" for k, v in overrides.items())]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        proc.deadline = time.monotonic() + limit  # the hard limit _wait enforces
        procs.append(proc)
    return procs


def _wait(procs):
    """`(exit code, stderr)` of each process; one past its limit is killed (by its pid)."""
    results = []
    for proc in procs:
        try:
            err = proc.communicate(timeout=max(0.1, proc.deadline - time.monotonic()))[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1]
        results.append((proc.returncode, err))
    return results


@pytest.mark.skipif(BACKEND != "jax", reason="JAX multi-process: runs under KERAS_BACKEND=jax")
def test_jax_two_hosts_lose_one_then_resume_to_the_same_weights(tmp_path):
    run_dir = tmp_path / "run"
    procs = _launch(run_dir, tmp_path, checkpoint_every=2, host_timeout=6)
    state = run_dir / "checkpoint" / "state.json"
    deadline = time.monotonic() + 240
    while not state.exists() and time.monotonic() < deadline and procs[1].poll() is None:
        time.sleep(0.2)
    assert state.exists(), _wait(procs)[0][1][-3000:]  # a step checkpoint was written (no deadlock)
    procs[1].send_signal(signal.SIGKILL)  # host 1 is lost, its own process by pid
    killed = time.monotonic()
    (code, err), _ = _wait(procs)
    assert code == 75 and time.monotonic() - killed < 40, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("keras-vit:")]
    assert len(lines) == 1 and "host 1 (" in lines[0] and "rerun the same command" in lines[0], err[-3000:]
    saved = json.loads(state.read_text())
    assert saved["step"] > 0 and (run_dir / "checkpoint" / saved["weights"]).exists()

    results = _wait(_launch(run_dir, tmp_path, checkpoint_every=2, host_timeout=6))
    assert [code for code, _ in results] == [0, 0], results[0][1][-3000:] + results[1][1][-3000:]
    first, second = (json.loads((tmp_path / f"host-{i}.json").read_text()) for i in range(2))
    assert first["resumed_from"] == saved["step"] and first["steps"] == second["steps"] > saved["step"]
    assert first["first"] == second["first"] and first["sum"] == second["sum"]  # the same weights on both hosts
    assert np.isfinite(first["val_loss"]) and first["top1"] == second["top1"]


def test_run_state_naming_a_file_out_of_its_folder_is_refused(tmp_path):
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "x.weights.h5").write_bytes(b"precious")
    folder = tmp_path / "run" / "checkpoint"
    folder.mkdir(parents=True)
    for name in ("../../other_run/x.weights.h5", "/etc/passwd", "step-1.weights.h5/../x", 3):
        (folder / "state.json").write_text(json.dumps({"step": 1, "weights": name}))
        state = checkpointing.RunState(str(tmp_path / "run"), None)
        with pytest.raises(ValueError, match="only a plain 'step-N.weights.h5'"):
            state.tidy()
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
    (chief / "checkpoint" / "state.json").write_text(json.dumps({"step": 6, "weights": "step-6.weights.h5"}))
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
