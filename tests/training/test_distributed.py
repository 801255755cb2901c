"""Data parallel training on two CPU devices / processes, with and without a teacher; each backend's in a subprocess.

Each test needs the process environment set before its framework starts (virtual XLA devices,
logical TF devices, a torchrun process group), so it runs tests/support/worker.py in a fresh
process, and only under the backend it is about.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.support.runs import save_teacher

BACKEND = keras.backend.backend()
WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support", "worker.py")


def _run(command, backend, tmp_path):
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = {}
    for name in sorted(os.listdir(tmp_path)):
        if name.startswith("result-"):
            with open(tmp_path / name) as handle:
                results[name] = json.load(handle)
    return results


def _assert_trained(report, strategy, replicas):
    assert report["strategy"] == strategy
    assert report["steps"] >= 2 * 11 and np.isfinite(report["loss"]).all()  # 2 epochs of ~384 / 32
    assert report["loss"][-1] < report["loss"][0]
    assert report["changed"] == len(report["replica_counts"])  # every variable was updated
    assert set(report["replica_counts"]) == {replicas}


def _assert_distilled(report, strategy, replicas):
    """Trained as `_assert_trained`, both losses of the distillation logged and finite, and the
    logged loss their mix (alpha 0.5): each of the three the mean over the replicas' examples."""
    _assert_trained(report, strategy, replicas)
    assert sorted(report["logged"]) == ["distill_loss", "label_loss"]
    for values in report["logged"].values():
        assert len(values) == len(report["loss"]) and np.isfinite(values).all()
    mixed = (np.array(report["logged"]["label_loss"]) + report["logged"]["distill_loss"]) / 2
    np.testing.assert_allclose(report["loss"], mixed, rtol=1e-5)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's DataParallel / ModelParallel: runs under KERAS_BACKEND=jax")
def test_jax_data_parallel_and_model_parallel_on_two_cpu_devices(tmp_path):
    command = [sys.executable, WORKER, "data_parallel,model_parallel,data_parallel+teacher", str(tmp_path),
               save_teacher(tmp_path)]
    results = _run(command, "jax", tmp_path)
    data_parallel, model_parallel = results["result-data_parallel-0.json"], results["result-model_parallel-0.json"]
    _assert_trained(data_parallel, "data_parallel", 2)
    assert data_parallel["identical"]  # both devices hold the same weights after training
    assert data_parallel["logged"] == {}
    _assert_trained(model_parallel, "model_parallel", 2)
    qkv_shape, qkv_shards = model_parallel["sharded"]["encoder/encoderblock_0/attention/qkv/kernel"]
    assert qkv_shape == [32, 96] and qkv_shards == [[32, 48]]  # split over the "model" axis
    assert model_parallel["sharded"]["encoder/encoderblock_0/mlp/dense_1/kernel"][1] == [[32, 32]]
    assert model_parallel["sharded"]["encoder/encoderblock_0/ln_1/gamma"][1] == [[32]]  # replicated
    # the same global batches give the same training under either layout
    np.testing.assert_allclose(model_parallel["loss"], data_parallel["loss"], rtol=1e-4)
    distilled = results["result-data_parallel+teacher-0.json"]  # a teacher of another width and resolution
    _assert_distilled(distilled, "data_parallel", 2)
    assert distilled["identical"]


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.distribute.MirroredStrategy: runs under KERAS_BACKEND=tensorflow")
def test_tensorflow_mirrored_strategy_on_two_logical_cpus(tmp_path):
    results = _run([sys.executable, WORKER, "mirrored,mirrored+teacher", str(tmp_path), save_teacher(tmp_path)],
                   "tensorflow", tmp_path)
    plain, distilled = results["result-mirrored-0.json"], results["result-mirrored+teacher-0.json"]
    _assert_trained(plain, "mirrored", 2)
    assert plain["identical"] and plain["logged"] == {}
    _assert_distilled(distilled, "mirrored", 2)
    assert distilled["identical"]


@pytest.mark.skipif(BACKEND != "torch", reason="torch.distributed with gloo: runs under KERAS_BACKEND=torch")
def test_torch_ddp_with_two_gloo_processes(tmp_path):
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        WORKER, "torch_ddp,torch_ddp+teacher", str(tmp_path), save_teacher(tmp_path),
    ]
    results = _run(command, "torch", tmp_path)
    names = [f"result-torch_ddp{kind}-{rank}.json" for kind in ("", "+teacher") for rank in (0, 1)]
    assert sorted(results) == sorted(names)
    for name, report in results.items():
        (_assert_distilled if "+teacher" in name else _assert_trained)(report, "torch_ddp", 1)
    for name in ("torch_ddp", "torch_ddp+teacher"):
        # each process read its own half of every batch; both log the global loss and end with the same weights
        first, second = results[f"result-{name}-0.json"], results[f"result-{name}-1.json"]
        assert first["loss"] == second["loss"] and first["logged"] == second["logged"]
        first, second = np.load(tmp_path / f"weights-{name}-0.npz"), np.load(tmp_path / f"weights-{name}-1.npz")
        assert sorted(first.files) == sorted(second.files) and len(first.files) == 20
        for key in first.files:
            np.testing.assert_array_equal(first[key], second[key])
