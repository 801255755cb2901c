"""CLIP image towers: transformers `CLIPVisionModelWithProjection` / `CLIPModel` / `MetaClip2Model`
folders saved with random weights, the same weights under OpenCLIP's `visual.*` keys
(safetensors and a torch pickle) and timm's `vit_*_clip_*` keys (both mappings written here from
the documented layouts), read by keras_vit against transformers' `get_image_features`; the
writers back to transformers and timm; bad files."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import registry
from keras_vit.weights.containers import read_safetensors, write_safetensors
from tests.support.checkpoints import model_of_cached_entry, randomize_family_model
from tests.support.commands import fails
from tests.support.text import open_clip_keys

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
              patch_size=8, projection_dim=16)
TOLERANCE = 1e-5
SIZES = (32, 48)  # the native size, and another (transformers' `interpolate_pos_encoding=True`)
TEXT_KEYS = ("token_embedding.weight", "positional_embedding", "transformer.resblocks.0.attn.in_proj_weight",
             "ln_final.weight", "text_projection", "logit_scale")  # an OpenCLIP file's text tower: left out


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _features(model, x):
    """transformers' `get_image_features` (`image_embeds` of the tower with projection), NHWC in."""
    pixels = torch.from_numpy(x.transpose(0, 3, 1, 2))
    with torch.no_grad():
        if isinstance(model, transformers.CLIPVisionModelWithProjection):
            return model(pixel_values=pixels, interpolate_pos_encoding=True).image_embeds.numpy()
        out = model.get_image_features(pixel_values=pixels, interpolate_pos_encoding=True)
        return (out.pooler_output if hasattr(out, "pooler_output") else out).numpy()


def _images(size, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype(np.float32)


def _check(folder_or_file, reference, **args):
    model = keras_vit.from_checkpoint(str(folder_or_file), input_shape=(None, None, 3), **args)
    for size in SIZES:
        x = _images(size)
        np.testing.assert_allclose(_numpy(model(x)), _features(reference, x), atol=TOLERANCE, rtol=0,
                                   err_msg=f"{size} px")
    return model


@pytest.fixture(scope="module", params=["quick_gelu", "gelu"])
def tower(request, tmp_path_factory):
    """`(folder, model, state dict)` of a CLIPVisionModelWithProjection with random weights."""
    folder = tmp_path_factory.mktemp(f"clip_{request.param}")
    config = transformers.CLIPVisionConfig(**VISION, hidden_act=request.param)
    model = randomize_family_model(transformers.CLIPVisionModelWithProjection(config), 0)
    model.save_pretrained(folder)
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    return str(folder), model, state, request.param == "quick_gelu"


def timm_keys(sd, depth):
    """transformers' CLIP image tower as timm's `vit_*_clip_*` state dict (its projection the head, zero bias)."""
    v = "vision_model."
    width = sd[v + "pre_layrnorm.weight"].shape[0]
    out = {
        "patch_embed.proj.weight": sd[v + "embeddings.patch_embedding.weight"],
        "cls_token": sd[v + "embeddings.class_embedding"].reshape(1, 1, width),
        "pos_embed": sd[v + "embeddings.position_embedding.weight"][None],
        "norm_pre.weight": sd[v + "pre_layrnorm.weight"], "norm_pre.bias": sd[v + "pre_layrnorm.bias"],
        "norm.weight": sd[v + "post_layernorm.weight"], "norm.bias": sd[v + "post_layernorm.bias"],
        "head.weight": sd["visual_projection.weight"],
        "head.bias": np.zeros(sd["visual_projection.weight"].shape[0], np.float32),
    }
    for i in range(depth):
        theirs, ours = f"{v}encoder.layers.{i}.", f"blocks.{i}."
        for p in ("weight", "bias"):
            out[ours + f"attn.qkv.{p}"] = np.concatenate([sd[theirs + f"self_attn.{n}_proj.{p}"] for n in "qkv"])
            for mine, hf in (("attn.proj", "self_attn.out_proj"), ("norm1", "layer_norm1"), ("norm2", "layer_norm2"),
                             ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
                out[ours + f"{mine}.{p}"] = sd[theirs + f"{hf}.{p}"]
    return out


def _write_open_clip(folder, tower_state, kind, config=None):
    os.makedirs(folder, exist_ok=True)
    keys = open_clip_keys(tower_state, VISION["num_hidden_layers"])
    keys.update({k: np.ones(3, np.float32) for k in TEXT_KEYS})
    if kind == "safetensors":
        path = os.path.join(folder, "open_clip_model.safetensors")
        write_safetensors(path, keys)
    else:
        path = os.path.join(folder, "open_clip_pytorch_model.bin")
        torch.save({k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in keys.items()}, path)
    if config is not None:
        with open(os.path.join(folder, "open_clip_config.json"), "w") as f:
            json.dump(config, f)
    return path


def test_transformers_tower_matches_get_image_features(tower):
    folder, reference, _, quick = tower
    model = _check(folder, reference)
    assert model.output_shape == (None, VISION["projection_dim"]) and model.preprocessing == "clip"
    encoder = model.get_layer("encoder")
    assert (encoder.quick_gelu, encoder.layer_norm_epsilon) == (quick, 1e-5)
    assert not any(w.path == "embedding/bias" for w in model.weights)


def test_tokens_are_the_last_hidden_state_after_post_layernorm_and_pooler_output_without_projection(tower):
    """transformers normalises only the pooled class token; keras_vit (as timm, OpenCLIP) every token."""
    folder, reference, _, _ = tower
    x = _images(32)
    with torch.no_grad():
        out = reference.vision_model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
        tokens = reference.vision_model.post_layernorm(out.last_hidden_state).numpy()
    unprojected = keras_vit.from_checkpoint(folder, projection_dim=None)
    np.testing.assert_allclose(_numpy(unprojected(x)), out.pooler_output.numpy(), atol=TOLERANCE, rtol=0)
    sequence = keras_vit.from_checkpoint(folder, pooling=None)
    np.testing.assert_allclose(_numpy(sequence(x)), tokens, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("pair", ["CLIPModel", "MetaClip2Model"])
def test_image_tower_of_a_pair_matches_get_image_features(tmp_path, pair):
    config_class = getattr(transformers, pair.replace("Model", "Config"))
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=64,
                max_position_embeddings=8, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    vision = {k: v for k, v in VISION.items() if k != "projection_dim"}
    config = config_class(vision_config=vision, text_config=text, projection_dim=16)
    model = randomize_family_model(getattr(transformers, pair)(config), 3)
    model.save_pretrained(tmp_path)
    _check(tmp_path, model)
    assert keras_vit.weights.read_checkpoint(str(tmp_path)).quick_gelu is True  # the config classes' default


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_open_clip_files_match_the_same_weights(tower, tmp_path, kind):
    """With `open_clip_config.json` (heads from `head_width`, activation from `quick_gelu`), and without (the
    arguments give what the file does not record). OpenCLIP resizes the table antialiased, transformers not:
    at the other size the test asks for transformers' resize."""
    folder, reference, state, quick = tower
    config = {"model_cfg": {"embed_dim": 16, "quick_gelu": quick,
                            "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8, "head_width": 8}}}
    path = _write_open_clip(tmp_path / "configured", state, kind, config)
    ckpt = keras_vit.weights.read_checkpoint(path)
    assert (ckpt.format, ckpt.interpolation, ckpt.quick_gelu, ckpt.layer_norm_epsilon) == (
        "open_clip", "bicubic_antialias", quick, 1e-5)
    _check(path, reference, interpolation="bicubic")
    _check(tmp_path / "configured", reference, interpolation="bicubic")  # the folder
    bare = _write_open_clip(tmp_path / "bare", state, kind)
    _check(bare, reference, num_heads=4, quick_gelu=quick, interpolation="bicubic")


def test_timm_clip_file_matches_the_same_weights(tower, tmp_path):
    folder, reference, state, quick = tower
    path = str(tmp_path / "model.safetensors")
    write_safetensors(path, timm_keys(state, VISION["num_hidden_layers"]))
    ckpt = keras_vit.weights.read_checkpoint(path, num_heads=4)
    assert (ckpt.format, ckpt.projection_dim, ckpt.classes, ckpt.pre_norm, ckpt.patch_bias) == ("timm", 16, None, True, False)
    # timm's files do not record quick GELU: given here (a named entry records it).
    model = _check(path, reference, num_heads=4, quick_gelu=quick, interpolation="bicubic")
    assert model.get_layer("encoder").layer_norm_epsilon == 1e-5


def test_timm_clip_classifier_stays_a_classifier(tower, tmp_path):
    """A trained head (non-zero bias) on a CLIP tower (timm's `*_clip_*.openai_ft_in1k`) is a classifier."""
    _, _, state, _ = tower
    sd = timm_keys(state, VISION["num_hidden_layers"])
    sd["head.weight"], sd["head.bias"] = np.ones((5, 32), np.float32), np.full(5, 0.5, np.float32)
    path = str(tmp_path / "ft.safetensors")
    write_safetensors(path, sd)
    ckpt = keras_vit.weights.read_checkpoint(path, num_heads=4)
    assert (ckpt.classes, ckpt.projection_dim) == (5, None)


def test_hf_round_trip_is_identical_and_runs_in_transformers(tower, tmp_path):
    folder, reference, state, quick = tower
    out = tmp_path / "hf"
    keras_vit.weights.convert_checkpoint(folder, out, format="hf")
    written, _ = read_safetensors(str(out / "model.safetensors"))
    assert set(written) == set(state)
    for key, value in state.items():
        np.testing.assert_array_equal(written[key].load(), value, err_msg=key)
    config = json.load(open(out / "config.json"))
    assert config["hidden_act"] == ("quick_gelu" if quick else "gelu") and config["projection_dim"] == 16
    again = transformers.CLIPVisionModelWithProjection.from_pretrained(out).eval()
    x = _images(32)
    np.testing.assert_allclose(_features(again, x), _features(reference, x), atol=1e-6, rtol=0)
    # A model exported (not a file converted) gives the same folder's numbers.
    model = keras_vit.from_checkpoint(folder)
    keras_vit.weights.export(model, tmp_path / "exported", format="hf")
    exported = transformers.CLIPVisionModelWithProjection.from_pretrained(tmp_path / "exported").eval()
    np.testing.assert_allclose(_features(exported, x), _features(reference, x), atol=1e-6, rtol=0)


def test_hf_export_carries_the_clip_preprocessing_transformers_applies(tower, tmp_path):
    folder, _, _, _ = tower
    keras_vit.weights.export(keras_vit.from_checkpoint(folder), tmp_path / "hf", format="hf")
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    pixels = np.random.default_rng(4).integers(0, 256, (2, 40, 32, 3)).astype(np.uint8)  # short side 32, cropped
    theirs = processor(list(pixels), return_tensors="np")["pixel_values"].transpose(0, 2, 3, 1)
    ours = keras_vit.preprocess_input(pixels[:, 4:36].astype(np.float32), preprocessing="clip")
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_hf_tower_without_projection_is_written_as_clip_vision_model(tower, tmp_path):
    folder, reference, _, _ = tower
    model = keras_vit.from_checkpoint(folder, projection_dim=None)
    keras_vit.weights.export(model, tmp_path / "hf", format="hf")
    again = transformers.CLIPVisionModel.from_pretrained(tmp_path / "hf").eval()
    x = _images(32)
    with torch.no_grad():
        expected = reference.vision_model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).pooler_output.numpy()
        got = again(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).pooler_output.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_timm_round_trip_is_identical_key_for_key(tower, tmp_path):
    _, _, state, _ = tower
    sd = timm_keys(state, VISION["num_hidden_layers"])
    src = str(tmp_path / "src.safetensors")
    write_safetensors(src, sd)
    for source in (src, _write_open_clip(tmp_path / "open_clip", state, "safetensors")):  # OpenCLIP -> timm too
        out = tmp_path / f"out-{len(os.listdir(tmp_path))}.safetensors"
        keras_vit.weights.convert_checkpoint(source, out, format="timm", num_heads=4)
        written, _ = read_safetensors(str(out))
        assert set(written) == set(sd)
        for key, value in sd.items():
            np.testing.assert_array_equal(written[key].load(), value, err_msg=key)


def test_keras_file_keeps_quick_gelu_and_the_clip_layers(tower, tmp_path):
    folder, reference, _, quick = tower
    model = keras_vit.from_checkpoint(folder)
    model.save(tmp_path / "clip.keras")
    again = keras.saving.load_model(tmp_path / "clip.keras")
    assert again.get_layer("encoder").quick_gelu is quick
    x = _images(32)
    np.testing.assert_allclose(_numpy(again(x)), _features(reference, x), atol=TOLERANCE, rtol=0)
    ckpt = keras_vit.weights.read_checkpoint(str(tmp_path / "clip.keras"))
    assert (ckpt.quick_gelu, ckpt.pre_norm, ckpt.projection_dim) == (quick, True, 16)


def test_named_entry_gives_its_quick_gelu_to_a_timm_file(tower, monkeypatch, tmp_path):
    """timm's CLIP files do not record quick GELU: the named entry does (16 px: the table resized as timm does)."""
    _, _, state, quick = tower
    monkeypatch.setenv("KERAS_VIT_HOME", str(tmp_path))
    architecture = dict(keras_vit.families.FAMILIES["CLIPB16"], patch_size=8, hidden_dim=32, depth=2,
                        num_heads=4, mlp_dim=64, projection_dim=16)
    entry = registry.WeightsEntry("CLIPTest", "tiny_clip", 32, None, None, "safetensors", "https://example.invalid/m",
                                  preprocessing="clip", quick_gelu=not quick)
    sd = timm_keys(state, VISION["num_hidden_layers"])
    model = model_of_cached_entry(monkeypatch, "CLIPTest", architecture, entry, sd)
    assert model.get_layer("encoder").quick_gelu is (not quick) and model.output_shape == (None, 16)


@pytest.mark.parametrize("edit, message", [
    (lambda sd: sd.pop("visual.ln_pre.weight"), r"missing keys: 'ln_pre\.weight'"),
    (lambda sd: sd.update({"visual.proj": np.zeros((33, 16), np.float32)}), r"'projection/kernel' has shape \(33, 16\)"),
    (lambda sd: sd.update({"visual.transformer.resblocks.0.attn.in_proj_weight": np.zeros((90, 32), np.float32)}),
     r"in_proj_weight.*cannot split width 30 of attention into 4 heads"),
], ids=["missing_key", "wrong_projection", "wrong_qkv"])
def test_bad_open_clip_files_are_refused_in_one_line(tower, tmp_path, edit, message):
    _, _, state, _ = tower
    sd = open_clip_keys(state, VISION["num_hidden_layers"])
    edit(sd)
    path = str(tmp_path / "open_clip_model.safetensors")
    write_safetensors(path, sd)
    with pytest.raises(ValueError, match=r"^[^\n]*" + message) as error:
        keras_vit.from_checkpoint(path, num_heads=4)
    assert "\n" not in str(error.value)


def test_command_line_converts_open_clip_and_refuses_a_bad_file_with_exit_2(tower, tmp_path, capsys):
    _, reference, state, quick = tower
    config = {"model_cfg": {"quick_gelu": quick, "vision_cfg": {"width": 32, "head_width": 8}}}
    path = _write_open_clip(tmp_path / "good", state, "safetensors", config)
    assert keras_vit.cli.main(["convert", path, str(tmp_path / "hf"), "--format", "hf"]) == 0
    x = _images(32)
    again = transformers.CLIPVisionModelWithProjection.from_pretrained(tmp_path / "hf").eval()
    np.testing.assert_allclose(_features(again, x), _features(reference, x), atol=1e-6, rtol=0)
    capsys.readouterr()  # transformers' progress bar
    sd = open_clip_keys(state, VISION["num_hidden_layers"])
    del sd["visual.transformer.resblocks.1.mlp.c_fc.weight"]
    os.makedirs(tmp_path / "bad")
    write_safetensors(str(tmp_path / "bad" / "open_clip_model.safetensors"), sd)
    fails(["convert", tmp_path / "bad", tmp_path / "out.safetensors", "--num-heads", "4"], capsys,
          "missing keys: 'transformer.resblocks.1.mlp.c_fc.weight'")


def test_open_clip_pooling_it_does_not_read_is_refused(tower, tmp_path):
    _, _, state, _ = tower
    config = {"model_cfg": {"vision_cfg": {"width": 32, "head_width": 8, "pool_type": "avg"}}}
    path = _write_open_clip(tmp_path, state, "safetensors", config)
    with pytest.raises(ValueError, match=r"^[^\n]*pool_type='avg'[^\n]*$"):
        keras_vit.weights.read_checkpoint(path)


def test_clip_weights_need_the_clip_options(tower):
    """A plain ViT of the same sizes is told what to add, in one error."""
    folder, _, _, _ = tower
    with pytest.raises(ValueError, match=r"pre_norm=True[\s\S]*patch_bias=False"):
        keras_vit.VisionTransformer(patch_size=8, hidden_dim=32, depth=2, num_heads=4, mlp_dim=64, include_top=False,
                                    pooling="token", weights=folder)


@pytest.mark.parametrize("format", ["npz", "kerashub"])
def test_formats_without_clip_refuse_it_in_one_line(tower, tmp_path, format):
    folder, _, _, _ = tower
    with pytest.raises(ValueError, match=r"^[^\n]*pre_norm=True[^\n]*cannot be written"):
        keras_vit.weights.convert_checkpoint(folder, tmp_path / f"out.{format}", format=format)


def test_clip_builder_without_weights_and_bad_options():
    """Without weights: GELU (OpenCLIP's `ViT-*` configurations), the projection, no patch bias; quick GELU is
    GELU's replacement, refused with the SiLU-gated MLP in one line."""
    model = keras_vit.CLIPB16(weights=None, patch_size=8, hidden_dim=32, depth=1, num_heads=4, mlp_dim=64,
                              input_shape=(32, 32, 3))
    assert model.output_shape == (None, 512) and model.get_layer("encoder").quick_gelu is False
    assert model.get_layer("embedding").use_bias is False and model.get_layer("pre_norm").epsilon == 1e-5
    with pytest.raises(ValueError, match=r"^quick_gelu=True replaces the GELU of mlp='gelu'[^\n]*$"):
        keras_vit.VisionTransformer(mlp="swiglu", quick_gelu=True)
    with pytest.raises(ValueError, match=r"^projection_dim=0 must be in \[1, "):
        keras_vit.VisionTransformer(projection_dim=0)
