"""Each checkpoint family at other sizes than its own, against its own library: transformers
models of random weights with `interpolate_pos_encoding`, timm's resampling followed in torch,
the original code's `scipy.ndimage.zoom`; at load time (a fixed `input_shape`), at run time
(`input_shape=(None, None, 3)`), after a `.keras` round trip and in an ONNX export."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.support.benchmarks import BENCHMARKS  # noqa: F401  (puts benchmarks/ on sys.path)
from tests.support.checkpoints import hf_reference_logits, original_npz_params, randomize_hf_model, timm_reference_logits

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from resize_agreement import timm_resample  # noqa: E402  (timm's resample_abs_pos_embed, in torch)

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
             patch_size=8)
NATIVE, LARGER, SMALLER, NON_SQUARE = (32, 32), (48, 48), (24, 24), (40, 24)
SIZES = (NATIVE, LARGER, SMALLER, NON_SQUARE)
TOLERANCE = 1e-5

# name: (config, model class, forward arguments, the convention keras_vit reads it with)
FAMILIES = {
    "vit": (transformers.ViTConfig, transformers.ViTModel, {"interpolate_pos_encoding": True}, "bicubic"),
    "deit": (transformers.DeiTConfig, transformers.DeiTModel, {"interpolate_pos_encoding": True}, "bicubic"),
    "dinov2": (transformers.Dinov2Config, transformers.Dinov2Model, {}, "bicubic"),
    "dinov2_reg": (lambda **kw: transformers.Dinov2WithRegistersConfig(num_register_tokens=2, **kw),
                   transformers.Dinov2WithRegistersModel, {}, "bicubic_antialias"),
    "siglip": (transformers.SiglipVisionConfig, transformers.SiglipVisionModel, {"interpolate_pos_encoding": True},
               "bicubic"),
}


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, *size, 3)).astype(np.float32)


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    """`(name, folder, reference)`: a transformers model of random weights saved to a folder."""
    config, model_class, _, _ = FAMILIES[request.param]
    pooler = {"add_pooling_layer": False} if request.param in ("vit", "deit") else {}
    reference = model_class(config(**SMALL), **pooler)
    folder = tmp_path_factory.mktemp(request.param)
    randomize_hf_model(reference, 7).eval().save_pretrained(folder)
    return request.param, str(folder), reference


def _expected(name, reference, x):
    with torch.no_grad():
        return reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **FAMILIES[name][2]).last_hidden_state


def test_transformers_families_at_their_own_library_sizes(family):
    name, folder, reference = family
    any_size = keras_vit.from_checkpoint(folder, include_top=False, pooling=None, input_shape=(None, None, 3))
    assert any_size.get_layer("posembed_input").interpolation == FAMILIES[name][3]
    for size in SIZES:
        x = _images(size)
        expected = _expected(name, reference, x).numpy()
        fixed = keras_vit.from_checkpoint(folder, include_top=False, pooling=None, input_shape=(*size, 3))  # resized at load time
        for model in (fixed, any_size):  # ... and at run time
            np.testing.assert_allclose(_numpy(model(x)), expected, atol=TOLERANCE, rtol=0, err_msg=f"{name} {size}")


def test_run_time_resize_survives_keras_round_trip(family, tmp_path):
    name, folder, reference = family
    model = keras_vit.from_checkpoint(folder, include_top=False, pooling=None, input_shape=(None, None, 3))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.get_layer("posembed_input").interpolation == FAMILIES[name][3]
    x = _images(NON_SQUARE, seed=1)
    np.testing.assert_allclose(_numpy(loaded(x)), _expected(name, reference, x).numpy(), atol=TOLERANCE, rtol=0)
    if name != "vit":
        return  # the `.keras` checkpoint reader maps the paper's layout only (no family tokens)
    # read back as a checkpoint, the .keras file keeps its convention
    again = keras_vit.from_checkpoint(str(tmp_path / "m.keras"), include_top=False, pooling=None, input_shape=(*SMALLER, 3))
    x = _images(SMALLER, seed=2)
    np.testing.assert_allclose(_numpy(again(x)), _expected(name, reference, x).numpy(), atol=TOLERANCE, rtol=0)


# ------------------------------------------------------------------- timm: resample_abs_pos_embed

@pytest.mark.parametrize("name, prefix", [("deit", 2), ("dinov2_reg", 0), ("siglip", 0)])
def test_timm_files_at_other_sizes(name, prefix, tmp_path):
    """timm files (written by keras_vit's timm export: `vit_*_reg4_dinov2` as `no_embed_class`,
    the patch rows only) with `dynamic_img_size`: timm's `_pos_embed` resamples `pos_embed`
    keeping its `prefix` rows; the reference is transformers' model of the same weights adding
    that table."""
    from safetensors.numpy import load_file

    config, model_class, forward, _ = FAMILIES[name]
    source = randomize_hf_model(model_class(config(**SMALL)), 8).eval()
    source.save_pretrained(tmp_path / "hf")
    path = str(tmp_path / "timm.safetensors")
    keras_vit.weights.export(keras_vit.from_checkpoint(str(tmp_path / "hf")), path, format="timm")
    pos_embed = load_file(path)["pos_embed"]
    # the GELU of the reference (transformers' SigLIP: tanh), which a timm file does not record
    args = dict(num_heads=2, include_top=False, pooling=None, approximate_gelu=source.config.hidden_act != "gelu")
    any_size = keras_vit.from_checkpoint(path, **args, input_shape=(None, None, 3))
    for size in SIZES:
        table = torch.from_numpy(timm_resample(pos_embed, (size[0] // 8, size[1] // 8), prefix))
        if name == "dinov2_reg":  # transformers adds the class row that timm folded into its class token
            table = torch.cat([source.embeddings.position_embeddings.detach()[:, :1], table], dim=1)
        source.embeddings.interpolate_pos_encoding = lambda embeddings, h, w, t=table: t
        x = _images(size, seed=3)
        with torch.no_grad():
            expected = source(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **forward).last_hidden_state
        fixed = keras_vit.from_checkpoint(path, **args, input_shape=(*size, 3))
        for model in (fixed, any_size):
            np.testing.assert_allclose(_numpy(model(x)), expected.numpy(), atol=TOLERANCE, rtol=0,
                                       err_msg=f"{name} {size}")


def test_timm_vit_file_at_other_sizes(rng, tmp_path):
    """A plain timm ViT file: its `pos_embed` resampled as timm does, the forward pass in plain torch."""
    params = original_npz_params(rng, grid=(4, 4), classes=3)
    model = keras_vit.from_checkpoint(_npz(tmp_path, params), classifier_activation=None, approximate_gelu=False)
    path = str(tmp_path / "timm.safetensors")
    keras_vit.weights.export(model, path, format="timm")
    from safetensors.numpy import load_file

    state = load_file(path)
    any_size = keras_vit.from_checkpoint(path, num_heads=4, classifier_activation=None, input_shape=(None, None, 3))
    for size in SIZES:
        x = _images(size, seed=4)
        resized = {**state, "pos_embed": timm_resample(state["pos_embed"], (size[0] // 8, size[1] // 8), 1)}
        expected = timm_reference_logits(resized, x, num_heads=4)
        fixed = keras_vit.from_checkpoint(path, num_heads=4, classifier_activation=None, input_shape=(*size, 3))
        for built in (fixed, any_size):
            np.testing.assert_allclose(_numpy(built(x)), expected, atol=TOLERANCE, rtol=0, err_msg=str(size))


# ---------------------------------------------------------------- the original code, big_vision

def _npz(tmp_path, params, name="vit.npz"):
    np.savez(tmp_path / name, **params)
    return str(tmp_path / name)


def test_original_npz_resized_as_vit_jax(rng, tmp_path):
    """vit_jax `checkpoint.py` (and big_vision `resample_posemb`): `scipy.ndimage.zoom(order=1)`
    of the patch rows, the class row kept; the reference is transformers' ViT holding that table."""
    ndimage = pytest.importorskip("scipy.ndimage")
    params = original_npz_params(rng, grid=(4, 4), classes=3)
    path = _npz(tmp_path, params)
    any_size = keras_vit.from_checkpoint(path, classifier_activation=None, input_shape=(None, None, 3))
    for size in (LARGER, SMALLER, NON_SQUARE):
        grid = (size[0] // 8, size[1] // 8)
        posemb = params["Transformer/posembed_input/pos_embedding"]
        zoomed = ndimage.zoom(posemb[0, 1:].reshape(4, 4, -1), (grid[0] / 4, grid[1] / 4, 1), order=1)
        resized = {**params, "Transformer/posembed_input/pos_embedding":
                   np.concatenate([posemb[:, :1], zoomed.reshape(1, -1, zoomed.shape[-1])], axis=1)}
        x = _images(size, seed=5)
        expected = hf_reference_logits(resized, x, num_heads=4, image_size=list(size))
        fixed = keras_vit.from_checkpoint(path, classifier_activation=None, input_shape=(*size, 3))
        for model in (fixed, any_size):
            np.testing.assert_allclose(_numpy(model(x)), expected, atol=TOLERANCE, rtol=0, err_msg=str(size))


def test_flexivit_run_time_resize_is_jax_image_resize(rng, tmp_path):
    """big_vision FlexiViT resizes at run time with `jax.image.resize(..., "linear")`
    (antialiased): chosen with `interpolation="bilinear_antialias"`."""
    jax = pytest.importorskip("jax")
    params = original_npz_params(rng, grid=(4, 4), classes=3)
    path = _npz(tmp_path, params)
    posemb = params["Transformer/posembed_input/pos_embedding"]
    any_size = keras_vit.from_checkpoint(path, interpolation="bilinear_antialias", input_shape=(None, None, 3))
    layer = any_size.get_layer("posembed_input")
    for size in (LARGER, SMALLER, (24, 40)):
        grid = (size[0] // 8, size[1] // 8)
        table = np.asarray(jax.image.resize(posemb[0, 1:].reshape(4, 4, -1), (*grid, posemb.shape[-1]), "linear"))
        expected = np.concatenate([posemb[:, :1], table.reshape(1, -1, table.shape[-1])], axis=1)
        loaded = keras_vit.from_checkpoint(path, interpolation="bilinear_antialias", input_shape=(*size, 3))
        run_time = np.concatenate([_numpy(t) for t in layer._patch_table(*grid, "float32")], axis=1)
        for got in (_numpy(loaded.get_layer("posembed_input").embeddings), run_time):
            np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0, err_msg=str(size))


# ------------------------------------------------------------------------------ exports

@pytest.mark.backends("torch")  # the one writer: the others hand the saved model to a PyTorch process
@pytest.mark.parametrize("interpolation", ["bicubic", "bicubic_antialias"])  # clamped taps; normalised weights
def test_onnx_export_keeps_the_convention_at_a_new_size(interpolation, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    from keras_vit.inference import serving

    model = keras_vit.VisionTransformer(8, 32, 1, 2, 64, classes=3, input_shape=(None, None, 3),
                                        interpolation=interpolation, classifier_activation=None)
    serving.export(model, "onnx", str(tmp_path / "vit.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "vit.onnx"), providers=["CPUExecutionProvider"])
    for size in (SMALLER, NON_SQUARE):
        x = _images(size, seed=7)
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(got, _numpy(model(x)), atol=TOLERANCE, rtol=0)


# ------------------------------------------------------------------------------ KerasHub

@pytest.mark.parametrize("antialias", [False, True])
def test_kerashub_dinov2_resized_as_keras_hub(antialias, tmp_path):
    """keras-hub's DINOv2 resizes its table (kept at `position_embedding_shape`) to
    `image_shape` with the backend's `ops.image.resize("bicubic")`: PyTorch's on that backend,
    the convention keras_vit keeps on all three."""
    keras_hub = pytest.importorskip("keras_hub")
    if keras.backend.backend() != "torch":
        pytest.skip("keras-hub resizes with the backend's image.resize; keras_vit follows PyTorch's")
    from tests.support.models import randomize

    arch = dict(patch_size=4, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64,
                position_embedding_shape=(16, 16, 3), antialias_in_interpolation=antialias)
    hub = randomize(keras_hub.models.DINOV2Backbone(image_shape=(16, 16, 3), **arch), seed=3)
    hub.save_to_preset(str(tmp_path / "preset"))
    for size in ((24, 24), (12, 12)):  # keras-hub takes square images only
        at_size = keras_hub.models.DINOV2Backbone.from_preset(str(tmp_path / "preset"), image_shape=(*size, 3))
        model = keras_vit.from_checkpoint(str(tmp_path / "preset"), input_shape=(*size, 3))
        x = _images(size, seed=8)
        np.testing.assert_allclose(_numpy(model(x)), _numpy(at_size(x)), atol=TOLERANCE, rtol=0, err_msg=str(size))
