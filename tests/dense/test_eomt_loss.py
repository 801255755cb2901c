"""EoMT's training loss (`keras_vit.dense.eomt_loss`) against transformers' `EomtLoss` on random
predictions and class-id masks (its point sampling pinned to the mask pixels' centres: the loss
over every pixel), the matching against its Hungarian matcher, the host solver inside each
backend's compiled step, and the mask annealing (`EoMTMaskAnnealing`, `annealing_steps`)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_vit.dense.eomt import EoMTMaskAnnealing, annealing_steps, eomt_model
from keras_vit.dense.eomt_loss import EoMTLoss, pack, prediction_losses, target_masks
from keras_vit.dense.matching import assign, assign_numpy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("scipy")
from transformers.models.eomt import modeling_eomt  # noqa: E402

B, Q, C, H, W = 3, 6, 4, 8, 8
WEIGHTS = {"loss_cross_entropy": 2.0, "loss_mask": 5.0, "loss_dice": 5.0}


def _labels(rng, scale):
    """Class ids at `scale` times the masks' size: image 0 lacks class 2, image 1 has ignored rows,
    image 2 is mostly class 3."""
    labels = rng.integers(0, C, (B, H * scale, W * scale))
    labels[0] = np.where(labels[0] == 2, 1, labels[0])
    labels[1, :2] = 255
    labels[2] = 3
    labels[2, :3 * scale, :3 * scale] = 0
    return labels


def _reference(classes, masks, labels, monkeypatch):
    """transformers' losses and matching, its sampled points the centres of the `H x W` mask pixels."""
    criterion = modeling_eomt.EomtLoss(transformers.EomtConfig(num_labels=C), WEIGHTS)
    ys, xs = np.meshgrid((np.arange(H) + 0.5) / H, (np.arange(W) + 0.5) / W, indexing="ij")
    points = torch.tensor(np.stack([xs.ravel(), ys.ravel()], -1)[None].astype(np.float32))
    criterion.sample_points_using_uncertainty = lambda logits, *args: points.repeat(logits.shape[0], 1, 1)
    monkeypatch.setattr(modeling_eomt.torch, "rand", lambda *args, **kwargs: points)  # the matcher's points
    present = [[k for k in range(C) if (image == k).any()] for image in labels]
    class_labels = [torch.tensor(p) for p in present]
    mask_labels = [torch.tensor(np.stack([image == k for k in p]).astype(np.float32)) for image, p in zip(labels, present)]
    args = (torch.tensor(masks), torch.tensor(classes), mask_labels, class_labels)
    losses = {k: float(v) for k, v in criterion(*args).items()}
    matched = np.zeros((B, Q, C), np.float32)
    for b, (rows, columns) in enumerate(criterion.matcher(*args)):
        matched[b, rows.numpy(), np.asarray(present[b])[columns.numpy()]] = 1
    monkeypatch.undo()
    return losses, matched


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    return rng.normal(size=(B, Q, C + 1)).astype(np.float32), (3 * rng.normal(size=(B, Q, H, W))).astype(np.float32), rng


@pytest.mark.parametrize("scale", [1, 2])  # targets at the masks' size, and at twice it (resized to the masks)
def test_losses_and_matching_equal_transformers(case, scale, monkeypatch):
    classes, masks, rng = case
    labels = _labels(rng, scale)
    expected, expected_matched = _reference(classes, masks, labels, monkeypatch)
    targets, present = target_masks(labels, C, (H, W))
    losses, matched = prediction_losses(ops.convert_to_tensor(classes), ops.reshape(masks, (B, Q, H * W)), targets,
                                        present)
    np.testing.assert_array_equal(ops.convert_to_numpy(matched), expected_matched)
    for ours, theirs in (("cross_entropy", "loss_cross_entropy"), ("mask", "loss_mask"), ("dice", "loss_dice")):
        np.testing.assert_allclose(float(losses[ours]), expected[theirs], rtol=1e-5, err_msg=ours)
    # two predictions (an intermediate one and the final): the weighted sums added, as EomtForUniversalSegmentation
    total = sum(WEIGHTS[k] * v for k, v in expected.items())
    got = EoMTLoss(C, (H, W))(labels, pack([(classes, masks), (classes, masks)]))
    np.testing.assert_allclose(float(got), 2 * total, rtol=1e-5)


def test_the_host_solver_runs_inside_a_compiled_step():
    rng = np.random.default_rng(1)
    cost = rng.normal(size=(2, 5, 3)).astype(np.float32)
    present = np.array([[True, False, True], [False, False, False]])
    expected = assign_numpy(cost, present)
    assert expected[0].sum() == 2 and expected[1].sum() == 0 and expected[0, :, 1].sum() == 0
    best = min(cost[0, i, 0] + cost[0, j, 2] for i in range(5) for j in range(5) if i != j)
    assert np.isclose((expected[0] * cost[0]).sum(), best)
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        got = jax.jit(assign)(cost, present)
    elif backend == "tensorflow":
        import tensorflow as tf

        got = tf.function(assign)(tf.constant(cost), tf.constant(present))
    else:
        got = assign(ops.convert_to_tensor(cost), ops.convert_to_tensor(present))
    np.testing.assert_array_equal(ops.convert_to_numpy(got), expected)


@pytest.mark.backend_independent
def test_annealing_steps_are_the_eomt_repositorys():
    # coco_panoptic_eomt_large_640: 12 epochs of 7391 steps, attn_mask_annealing_{start,end}_steps
    assert annealing_steps(88692, 4) == [(14782, 29564), (29564, 44346), (44346, 59128), (59128, 73910)]


def test_mask_annealing_drops_query_masks_with_the_falling_probability():
    layer = EoMTMaskAnnealing(num_queries=2, start=2, end=6, seed=0)
    valid = np.zeros((4000, 5, 5), bool)  # two queries, three other tokens; no pair allowed
    kept = []
    for step in range(7):
        expected = 1.0 if step <= 2 else (1 - min(step - 2, 4) / 4) ** 0.9
        assert np.isclose(float(layer.probability()), expected), step
        inference = ops.convert_to_numpy(layer(valid, training=False))
        assert (inference[:, :2].all() if expected == 0 else not inference[:, :2].any()) and not inference[:, 2:].any()
        out = ops.convert_to_numpy(layer(valid, training=True))
        rows = out[:, :2]
        assert (rows.all(-1) | ~rows.any(-1)).all() and not out[:, 2:].any()  # whole query rows dropped, nothing else
        kept.append(1 - rows.all(-1).mean())
    np.testing.assert_allclose(kept, [1, 1, 1, 0.77, 0.54, 0.29, 0], atol=0.03)


def test_bad_annealing_is_refused():
    import keras_vit

    vit = keras_vit.VisionTransformer(input_shape=(32, 32, 3), patch_size=8, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32,
                                      include_top=False, pooling=None)
    with pytest.raises(ValueError, match="one .start, end. step pair per query block"):
        eomt_model(vit, 3, num_queries=4, num_blocks=2, annealing=[(0, 1)])
    with pytest.raises(ValueError, match="masked_attention=True"):
        eomt_model(vit, 3, num_queries=4, num_blocks=1, masked_attention=False, annealing=[(0, 1)])


def test_an_annealed_model_records_which_blocks_still_mask():
    import keras_vit
    from keras_vit.dense.eomt import eomt_training_model
    from keras_vit.weights.export import model_checkpoint

    vit = keras_vit.VisionTransformer(input_shape=(32, 32, 3), patch_size=8, hidden_dim=16, depth=2, num_heads=2,
                                      mlp_dim=32, include_top=False, pooling=None)
    model, training = eomt_training_model(vit, 3, total_steps=8, num_queries=4, num_blocks=2)
    assert training.output.shape == (None, 3, 4, 4 + 16 * 16)  # two blocks' predictions and the final one
    annealers = [model.get_layer(f"eomt_annealing_{j}") for j in range(2)]
    assert [(a.start, a.end) for a in annealers] == [(2, 4), (4, 6)]
    for step, expected in ((0, [1, 1]), (4, [0, 1]), (6, [0, 0])):
        for annealer in annealers:
            annealer.step.assign(float(step))
        ckpt = model_checkpoint(model)
        recorded = [k for k in ckpt.tensors if "mask_probs" in k]
        assert len(recorded) == 1 and not any("annealing" in k for k in ckpt.tensors)
        np.testing.assert_array_equal(ckpt.tensors[recorded[0]].load(), expected)
    annealers[0].step.assign(3.0)
    with pytest.raises(ValueError, match="annealed part-way"):
        model_checkpoint(model)
