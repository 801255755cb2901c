"""EoMT (`keras_vit.dense.eomt`) read from transformers `EomtForUniversalSegmentation` folders saved
with random weights: class and mask logits against transformers' own, the semantic maps against its
image processor's, the `.keras` round trip, the mutations the comparison catches, bad input."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.dense import eomt_model, post_process_semantic_segmentation
from keras_vit.dense.eomt import eomt_of_checkpoint
from keras_vit.weights.formats.eomt import Head, split_head
from keras_vit.weights.reading import read_checkpoint
from tests.support.checkpoints import randomize_family_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZE = 32
TINY = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, image_size=SIZE, patch_size=8, num_blocks=2,
            num_queries=6, num_register_tokens=4, num_labels=3)
# "swiglu": one upscaling block, no registers, three query blocks of which only the middle one masks (the
# last keeps its mask, as transformers does); "unmasked": an annealed model (attn_mask_probs 0).
CASES = {
    "base": ({}, (1.0, 1.0)),
    "swiglu": (dict(use_swiglu_ffn=True, num_upscale_blocks=1, num_register_tokens=0, num_blocks=3), (0.0, 1.0, 0.0)),
    "unmasked": ({}, (0.0, 0.0)),
}
OUTPUTS = ("class_queries_logits", "masks_queries_logits")
RTOL = 1e-4


def _save(folder, options, probs, seed=0):
    model = transformers.EomtForUniversalSegmentation(transformers.EomtConfig(**{**TINY, **options}))
    randomize_family_model(model, seed)
    with torch.no_grad():
        model.attn_mask_probs.copy_(torch.tensor(probs))
    model.save_pretrained(folder)
    return model


def _images(seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype(np.float32)


def _run(reference, images):
    with torch.no_grad():
        return reference(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))


def _numpy(model, images):
    """The model's outputs as NumPy, through `predict_on_batch` (one compiled graph: JAX's op-by-op
    first call compiles every op)."""
    outputs = model.predict_on_batch(images)
    return {k: np.asarray(outputs[k]) for k in OUTPUTS}


def _close(ours, expected):
    """Whether both outputs have transformers' shapes and values within RTOL of their largest."""
    return all(ours[k].shape == tuple(getattr(expected, k).shape) and np.allclose(
        ours[k], getattr(expected, k).numpy(), rtol=RTOL, atol=RTOL * np.abs(getattr(expected, k).numpy()).max())
        for k in OUTPUTS)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    """`(transformers model, its folder, keras_vit's model of the folder)`, once per case."""
    folder = tmp_path_factory.mktemp(f"eomt_{request.param}")
    reference = _save(folder, *CASES[request.param])
    return reference, folder, keras_vit.from_checkpoint(str(folder))


def test_logits_match_transformers(case):
    reference, _, model = case
    images = _images()
    expected, ours = _run(reference, images), _numpy(model, images)
    for key in OUTPUTS:
        want = getattr(expected, key).numpy()
        np.testing.assert_allclose(ours[key], want, rtol=RTOL, atol=RTOL * np.abs(want).max())
    assert model.preprocessing == "eomt"


def test_semantic_maps_match_the_image_processor(case):
    """`EomtImageProcessor` (its PIL twin without torchvision), whole images, two target sizes."""
    reference, _, model = case
    images = _images(1)
    processor = transformers.EomtImageProcessor(size={"shortest_edge": SIZE, "longest_edge": SIZE})
    targets = [(50, 37), (20, 64)]
    expected = processor.post_process_semantic_segmentation(
        _run(reference, images), target_sizes=targets, size={"shortest_edge": SIZE, "longest_edge": SIZE})
    maps = post_process_semantic_segmentation(_numpy(model, images), targets, size=(SIZE, SIZE))
    for ours, theirs, target in zip(maps, expected, targets):
        assert ours.shape == target
        np.testing.assert_array_equal(ours, theirs.numpy())


@pytest.mark.parametrize("size, target", [((7, 9), (20, 13)), ((20, 13), (7, 9)), ((16, 16), (50, 37)), ((33, 8), (32, 64))])
def test_post_processing_resizes_as_torch(size, target):
    """Within torch's own float32 rounding (its float64 resize differs from its float32 one by up to 3e-6 here)."""
    from keras_vit.dense.eomt_postprocess import resize_maps

    maps = np.random.default_rng(0).standard_normal((2, 3, *size)).astype(np.float32)
    expected = torch.nn.functional.interpolate(torch.from_numpy(maps), size=target, mode="bilinear", align_corners=False)
    np.testing.assert_allclose(resize_maps(maps, target), expected.numpy(), rtol=0, atol=5e-6)


def test_keras_file_round_trip(case, tmp_path):
    _, _, model = case
    path = tmp_path / "eomt.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    images = _images(2)
    for key, value in _numpy(model, images).items():
        np.testing.assert_array_equal(_numpy(loaded, images)[key], value)
    assert loaded.preprocessing == "eomt"


# Config fields that say who wrote the file or how it trains (the losses), not what the model is.
_NOT_THE_MODEL = ("transformers_version", "dtype", "torch_dtype", "initializer_range", "drop_path_rate",
                  "attention_dropout", "hidden_dropout_prob", "class_weight", "mask_weight", "dice_weight",
                  "train_num_points", "oversample_ratio", "importance_sample_ratio")


def test_export_writes_the_transformers_folder_back(case, tmp_path):
    """`export(format="hf")`: the same tensors and model config as the folder read, and transformers
    loads it (model and image processor) with the same logits."""
    import json

    from safetensors.numpy import load_file

    reference, folder, model = case
    keras_vit.weights.export(model, tmp_path / "out", format="hf")
    original, written = (load_file(f / "model.safetensors") for f in (folder, tmp_path / "out"))
    assert set(written) == set(original)
    for key, value in original.items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    configs = [{k: v for k, v in json.loads((f / "config.json").read_text()).items() if k not in _NOT_THE_MODEL}
               for f in (folder, tmp_path / "out")]
    assert configs[1] == configs[0]
    loaded = transformers.EomtForUniversalSegmentation.from_pretrained(tmp_path / "out").eval()
    assert _close(_numpy(model, _images()), _run(loaded, _images()))
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "out")
    assert processor.size["shortest_edge"] == SIZE and tuple(processor.image_mean) == keras_vit.preprocessing.IMAGENET_MEAN


def _mutant(folder, without=(), encoder_norm=None, **changes):
    """The folder's model built as `from_checkpoint` does, with the head's options changed by `changes`,
    its canonical tensors containing any of `without` left out and, if given, `encoder_norm` in the
    backbone's final LayerNorm's place."""
    ckpt, head = split_head(read_checkpoint(str(folder)))
    backbone = keras_vit.VisionTransformer(**ckpt.architecture(), include_top=False, weights=ckpt)
    if encoder_norm is not None:  # past Keras' tracking of the built layer's sub-layers
        object.__setattr__(backbone.get_layer("encoder"), "encoder_norm", encoder_norm)
    tensors = {k: v for k, v in head.tensors.items() if not any(w in k for w in without)}
    return eomt_of_checkpoint(backbone, ckpt, Head({**head.options, **changes}, tensors))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eomt_mutations")
    reference = _save(folder, *CASES["base"])
    return folder, _run(reference, _images())


@pytest.mark.parametrize("mutation", [
    dict(num_blocks=TINY["num_blocks"] + 1, masked_attention=True),  # the queries joined one block early
    dict(encoder_norm=keras.layers.Identity()),  # the head reads the tokens without the final LayerNorm
    dict(num_upscale_blocks=0, without=("upscale_",)),  # the patch tokens not upscaled
    dict(masked_attention=False),  # no masked attention
], ids=["queries_early", "no_final_norm", "no_upscale", "no_masks"])
def test_mutations_fail_the_comparison(base, mutation):
    folder, expected = base
    assert not _close(_numpy(_mutant(folder, **mutation), _images()), expected)


def test_the_unmutated_rebuild_passes_the_comparison(base):
    folder, expected = base
    assert _close(_numpy(_mutant(folder), _images()), expected)


@pytest.fixture(scope="module")
def backbone():
    return keras_vit.VisionTransformer(8, 32, 2, 2, 64, include_top=False, input_shape=(SIZE, SIZE, 3))


@pytest.mark.parametrize("options, message", [
    (dict(num_blocks=3), r"num_blocks=3: the backbone has 2 blocks; expected 1\.\.2\."),
    (dict(num_classes=0), r"num_classes=0: expected a whole number >= 1\."),
    (dict(num_upscale_blocks=-1), r"num_upscale_blocks=-1: expected a whole number >= 0\."),
    (dict(masked_attention=(True,)), r"masked_attention=\(True,\): expected True, False or 2 of them"),
])
def test_bad_options_are_refused_in_one_line(backbone, options, message):
    with pytest.raises(ValueError, match=rf"^{message}[^\n]*$"):
        eomt_model(backbone, **{"num_classes": 3, "num_blocks": 2, **options})


def test_backbone_without_final_norm_on_the_tokens_is_refused():
    gap = keras_vit.VisionTransformer(8, 32, 2, 2, 64, include_top=False, pooling="avg", fc_norm=True,
                                      input_shape=(SIZE, SIZE, 3))
    with pytest.raises(ValueError, match=r"^[^\n]*EoMT needs a backbone with the final LayerNorm on its tokens[^\n]*$"):
        eomt_model(gap, num_classes=3, num_blocks=1)


@pytest.mark.parametrize("outputs, targets, size, message", [
    ({}, [(8, 8)], None, r"outputs: expected the EoMT model's dict"),
    (None, [(8, 8)], None, r"target_sizes: expected one \(height, width\) per image \(2\)"),
    (None, [(8, 8), (0, 4)], None, r"target_sizes\[1\]=\(0, 4\): expected \(height, width\)"),
    (None, [(8, 8)] * 2, (32,), r"size=\(32,\): expected \(height, width\)"),
])
def test_bad_post_processing_input_is_refused_in_one_line(backbone, outputs, targets, size, message):
    if outputs is None:
        outputs = _numpy(eomt_model(backbone, num_classes=3, num_queries=4, num_blocks=1), _images())
    with pytest.raises(ValueError, match=rf"^{message}[^\n]*$"):
        post_process_semantic_segmentation(outputs, targets, size=size)


def test_annealing_fractions_are_refused_in_one_line(tmp_path):
    _save(tmp_path, {}, (1.0, 0.5))
    with pytest.raises(ValueError, match=r"^[^\n]*attn_mask_probs=\[1\.0, 0\.5\]; keras_vit runs EoMT with 0 or 1[^\n]*$"):
        keras_vit.from_checkpoint(str(tmp_path))


def test_any_input_size(base):
    """`input_shape=(None, None, 3)`: the native size's numbers, and masks 4x the grid at another size
    (transformers' EoMT runs at its configured size only: no reference there)."""
    folder, expected = base
    model = keras_vit.from_checkpoint(str(folder), input_shape=(None, None, 3))
    assert _close(_numpy(model, _images()), expected)
    images = np.random.default_rng(3).uniform(-1, 1, (2, 48, 40, 3)).astype(np.float32)
    outputs = _numpy(model, images)
    assert outputs["masks_queries_logits"].shape == (2, TINY["num_queries"], 24, 20)
    assert np.all(np.isfinite(outputs["masks_queries_logits"]))


def test_export_in_another_format_is_refused_in_one_line(base, tmp_path):
    model = _mutant(base[0])
    with pytest.raises(ValueError, match=r"^[^\n]*an EoMT segmentation model cannot be written as timm; export with "
                                         r"format= hf[^\n]*$"):
        keras_vit.weights.export(model, tmp_path / "x.safetensors", format="timm")
    assert not (tmp_path / "x.safetensors").exists()


def test_export_of_what_transformers_eomt_cannot_hold_is_refused_in_one_line(backbone, tmp_path):
    model = eomt_model(backbone, num_classes=3, num_queries=4, num_blocks=1)  # no LayerScale, no registers
    with pytest.raises(ValueError, match=r"^Cannot export [^\n]* as a transformers EoMT model: it has "
                                         r"layer_scale_init=None \(EoMT: 1\.0\)[^\n]*$"):
        keras_vit.weights.export(model, tmp_path / "out", format="hf")


def test_new_queries_start_distinct(backbone):
    """As transformers' `nn.Embedding`: N(0, 1) (zeros, as registers start, would make every query the same)."""
    model = eomt_model(backbone, num_classes=3, num_queries=16, num_blocks=1)
    queries = keras.ops.convert_to_numpy(model.get_layer("eomt_queries").tokens)[0]
    assert 0.7 < queries.std() < 1.3 and np.linalg.matrix_rank(queries) == 16


def test_dense_model_builds_eomt(backbone):
    """`DenseModel(backbone, head="eomt")` is `eomt_model`: the same layers and outputs."""
    model = keras_vit.DenseModel(backbone, head="eomt", num_classes=3, num_queries=4, num_blocks=1)
    again = eomt_model(backbone, num_classes=3, num_queries=4, num_blocks=1)
    assert [type(layer).__name__ for layer in model.layers] == [type(layer).__name__ for layer in again.layers]
    assert set(model.output) == {"class_queries_logits", "masks_queries_logits"}
    with pytest.raises(ValueError, match="head='eomt' segments"):
        keras_vit.DenseModel(backbone, head="eomt", task="depth", num_classes=3)
