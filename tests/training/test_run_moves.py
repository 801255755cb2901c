"""Runs that move: a run checkpointed after epoch 1 (8 steps) continues to 16 on another backend
or on another number of hosts (1 -> 2, 2 -> 1) and ends where the unmoved run ends (the
same data position, schedule and weights within float tolerance). (A resume with another global
batch is refused in one line: tests/training/test_train.py and, from the command line,
test_commands.py.) (2 -> 4 hosts would rerun the 1 -> 2 path: a checkpoint of fewer
hosts read by more, each host finding its part of the same data position.)

The children are tests/support/multihost_worker.py (tiny digits ViT, drop-path 0, deterministic
input), each under a hard `timeout -s KILL` (tests/support/multihost.py); the test drives the
backends itself, so it runs once, under KERAS_BACKEND=jax.
"""

import json
import shutil

import keras
import numpy as np
import pytest

import keras_vit  # noqa: F401  (registers the classes the saved models name)
from tests.support import multihost
from tests.support.runs import saved_weights

BACKEND = keras.backend.backend()
LIMIT = 300  # seconds any child may live
RUN = dict(drop_path=0, deterministic="true", checkpoint_every=3, host_timeout=60)


def _hosts(run_dir, out, hosts=1, backend="jax", **overrides):
    strategy = "data_parallel" if backend == "jax" else "none"
    return multihost.jax_hosts(run_dir, str(out), hosts, LIMIT, backend, strategy=strategy, **{**RUN, **overrides})


def _succeeded(results):
    for code, out in results:
        assert code == 0, out[-3000:]


def _assert_same_weights(got, want, what):
    assert got.keys() == want.keys()
    worst = max(np.abs(got[path] - want[path]).max() for path in want)
    assert worst < 1e-5, f"{what}: weights differ from the unmoved run's by up to {worst:.2e}"


def _reports(out, hosts=1):
    return [json.loads((out / f"host-{i}.json").read_text()) for i in range(hosts)]


@pytest.mark.skipif(BACKEND != "jax", reason="drives JAX, PyTorch and 2 JAX hosts itself: runs under JAX")
def test_a_run_moves_between_backends_and_host_counts(tmp_path):
    names = ("one", "two", "unmoved", "torch", "one_to_two", "two_to_one")
    runs = {name: tmp_path / name for name in names}
    outs = {name: tmp_path / f"{name}.out" for name in runs}
    for out in outs.values():
        out.mkdir()
    # epoch 1 (8 steps) on 1 JAX host and on 2 (the same global batch of 32), then stopped
    _succeeded(multihost.finish([*_hosts(runs["one"], outs["one"], stop_after_epoch=1),
                                 *_hosts(runs["two"], outs["two"], hosts=2, stop_after_epoch=1)]))
    for run in ("one", "two"):
        assert json.loads((runs[run] / "checkpoint" / "state.json").read_text())["step"] == 8
    for name in ("unmoved", "torch", "one_to_two"):
        shutil.copytree(runs["one"], runs[name])
    shutil.copytree(runs["two"], runs["two_to_one"])

    procs = [*_hosts(runs["unmoved"], outs["unmoved"]), *_hosts(runs["torch"], outs["torch"], backend="torch"),
             *_hosts(runs["one_to_two"], outs["one_to_two"], hosts=2), *_hosts(runs["two_to_one"], outs["two_to_one"])]
    _succeeded(multihost.finish(procs))

    unmoved = saved_weights(str(runs["unmoved"] / "final.keras"))
    (reference,) = _reports(outs["unmoved"])
    assert reference["resumed_from"] == 8 and reference["steps"] == 16
    for name, hosts in (("torch", 1), ("one_to_two", 2), ("two_to_one", 1)):
        for report in _reports(outs[name], hosts):  # the same data position and schedule: epoch 2's loss
            assert report["resumed_from"] == 8 and report["steps"] == 16
            np.testing.assert_allclose(report["loss"], reference["loss"], rtol=1e-5, err_msg=name)
        _assert_same_weights(saved_weights(str(runs[name] / "final.keras")), unmoved, name)


def test_a_mixup_run_is_not_resumed_on_another_number_of_processes(tmp_path, monkeypatch):
    """Each process draws the MixUp / CutMix of its own part of a batch: a run that mixed on 2
    processes would mix otherwise on 1, so that resume is refused in one line."""
    from sklearn.datasets import load_digits

    from keras_vit.training import engine, recipe, train
    from keras_vit.training.parallel import distribution

    digits = load_digits()
    data = ((digits.images[:80] * (255 / 16)).astype("uint8"), digits.target[:80])
    config = recipe("digits", image_size=8, patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                    batch_size=32, steps=1, mixup=0.2, tensorboard=False, verbose=0, output_dir=str(tmp_path))
    with monkeypatch.context() as patch:  # process 0 of 2 (it reads half of every batch)
        patch.setattr(engine.distribution, "plan", lambda *args: distribution.Plan("none", part=(2, 0)))
        train(config, data=data)
    with pytest.raises(ValueError, match=r"different settings \(mixup_cutmix_processes: 2 -> 1\); resume it with"):
        train(config, data=data)
    assert train(config.replace(mixup=0.0), data=data).resumed_from == 1  # without mixing the move is exact
