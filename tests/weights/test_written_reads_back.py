"""A written file is one the library reads back (issue 42, class 5): `convert` exits 0 only when
its source, and the file it writes, are whole as `from_checkpoint` builds them (every block
holding block 0's tensors, a position table that fits a grid); a family config's null where a
value belongs is refused in one line, never read as the key's absence."""

import json
import os

import numpy as np
import pytest

import keras_vit
from keras_vit.utils import files
from keras_vit.cli import main
from tests.support.commands import fails

ARCH = dict(patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3), classes=3,
            layer_scale_init=1e-5, qk_norm=True)
POSEMB = "pos_embed"


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """`{key: array}` of a tiny ViT's timm file, with LayerScale and qk_norm (optional tensors)."""
    from safetensors.numpy import load_file

    path = tmp_path_factory.mktemp("timm") / "vit.safetensors"
    keras_vit.weights.export(keras_vit.VisionTransformer(**ARCH), path, format="timm")
    return load_file(str(path))


def _without(key):
    return lambda arrays: {k: v for k, v in arrays.items() if k != key}


# Sources from_checkpoint cannot build: (change of the timm file, what the line says).
DEFECTS = {
    "block 1 lacks its LayerScale": (_without("blocks.1.ls2.gamma"), "block 1 lacks"),
    "block 1 lacks its key norm": (_without("blocks.1.attn.k_norm.weight"), "block 1 lacks"),
    "a position table of no grid": (lambda a: {**a, POSEMB: a[POSEMB][:, :8]}, "onto a 2-D patch grid"),
}


def _save(arrays, path):
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(path))


@pytest.mark.backend_independent
@pytest.mark.parametrize("output", ["out.safetensors", "out.keras", "hf"])
@pytest.mark.parametrize("defect", DEFECTS)
def test_convert_writes_nothing_from_checkpoint_could_not_build(whole, tmp_path, capsys, defect, output):
    change, said = DEFECTS[defect]
    _save(change(whole), tmp_path / "in.safetensors")
    with pytest.raises(ValueError):
        keras_vit.from_checkpoint(str(tmp_path / "in.safetensors"), num_heads=2)  # the library's own reader refuses it
    extra = ["--format", "hf"] if output == "hf" else []
    fails(["convert", tmp_path / "in.safetensors", tmp_path / output, "--num-heads", "2", *extra], capsys, said)
    assert sorted(os.listdir(tmp_path)) == ["in.safetensors"]  # nothing written, no temporary left


@pytest.mark.backend_independent
@pytest.mark.parametrize("output", ["out.safetensors", "out.timm.safetensors"])
def test_convert_of_a_whole_checkpoint_reads_back(whole, tmp_path, output):
    _save(whole, tmp_path / "in.safetensors")
    assert main(["convert", str(tmp_path / "in.safetensors"), str(tmp_path / output), "--num-heads", "2"]) == 0
    assert not [n for n in os.listdir(tmp_path) if n.startswith(files.TMP_PREFIX)]
    assert keras_vit.from_checkpoint(str(tmp_path / output), num_heads=2).count_params() > 0


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DINOV3 = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=16,
              patch_size=4, num_register_tokens=0, layer_norm_eps=1e-5)


@pytest.fixture(scope="module")
def dinov3_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dinov3") / "in"
    transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**DINOV3)).eval().save_pretrained(folder)
    return folder


@pytest.mark.backend_independent
@pytest.mark.parametrize("key", ["rope_theta", "layer_norm_eps", "hidden_act"])
def test_a_family_config_null_is_refused_not_read_as_absent(dinov3_folder, tmp_path, capsys, key):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in os.listdir(dinov3_folder):
        (folder / name).write_bytes((dinov3_folder / name).read_bytes())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, key: None}))
    with pytest.raises(ValueError, match=f"config.json: {key} is null") as refused:
        keras_vit.from_checkpoint(str(folder))
    assert "\n" not in str(refused.value)
    fails(["convert", folder, tmp_path / "out", "--format", "hf"], capsys, f"{key} is null")
    assert not (tmp_path / "out").exists()


PLAIN = {**ARCH, "qk_norm": False, "layer_scale_init": None}


def _declaring(folder, tmp_path, edit, name="config.json"):
    """A copy of `folder` whose configuration file `name` is changed by `edit(config)` (in place)."""
    copy = tmp_path / "declared"
    copy.mkdir()
    for file in os.listdir(folder):
        (copy / file).write_bytes((folder / file).read_bytes())
    config = json.loads((copy / name).read_text())
    edit(config)
    (copy / name).write_text(json.dumps(config))
    return copy


def _hf_vit(tmp_path):
    keras_vit.weights.export(keras_vit.VisionTransformer(**PLAIN), tmp_path / "vit", format="hf")
    return tmp_path / "vit", lambda config, n: config.update(num_hidden_layers=n), 2


def _kerashub_vit(tmp_path):
    keras_vit.weights.export(keras_vit.VisionTransformer(**PLAIN, approximate_gelu=False), tmp_path / "hub", format="kerashub")
    return tmp_path / "hub", lambda config, n: config["config"].update(num_layers=n), 2


def _dinov3(tmp_path):
    return _hf_saved(tmp_path, transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**DINOV3))), \
        lambda config, n: config.update(num_hidden_layers=n), 1


def _siglip(tmp_path):
    config = transformers.SiglipVisionConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=64, image_size=16, patch_size=4)
    return _hf_saved(tmp_path, transformers.SiglipVisionModel(config)), lambda c, n: c.update(num_hidden_layers=n), 1


def _clip_pair(tmp_path):
    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=16,
                  patch_size=4, projection_dim=8)
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, projection_dim=8,
                vocab_size=64, max_position_embeddings=8)
    model = transformers.CLIPModel(transformers.CLIPConfig(vision_config=vision, text_config=text, projection_dim=8))
    return _hf_saved(tmp_path, model), lambda c, n: c["vision_config"].update(num_hidden_layers=n), 1


def _open_clip(tmp_path):
    from tests.support.text import open_clip_folder

    model = open_clip_folder(str(tmp_path / "open_clip"))
    return tmp_path / "open_clip", lambda c, n: c["model_cfg"]["vision_cfg"].update(layers=n), \
        model.config.vision_config.num_hidden_layers


def _hf_saved(tmp_path, model):
    model.eval().save_pretrained(tmp_path / "saved")
    return tmp_path / "saved"


@pytest.mark.backend_independent
@pytest.mark.parametrize("layout", [_hf_vit, _kerashub_vit, _dinov3, _siglip, _clip_pair, _open_clip],
                         ids=lambda f: f.__name__[1:])
def test_a_config_declaring_another_block_count_than_its_tensors_is_refused(tmp_path, capsys, layout):
    folder, declare, depth = layout(tmp_path)
    name = "open_clip_config.json" if layout is _open_clip else "config.json"
    assert keras_vit.from_checkpoint(str(folder)).count_params() > 0  # the config as written reads
    for declared in (depth + 1, depth - 1 or depth + 5):
        (tmp_path / str(declared)).mkdir()
        bad = _declaring(folder, tmp_path / str(declared), lambda config: declare(config, declared), name)
        with pytest.raises(ValueError, match=f"declares {declared} blocks.*tensors hold {depth}") as refused:
            keras_vit.from_checkpoint(str(bad))
        assert "\n" not in str(refused.value)
    capsys.readouterr()  # transformers' progress bars from writing the folder
    fails(["convert", bad, tmp_path / "out", "--format", "hf"], capsys, f"declares {declared} blocks")
    assert not (tmp_path / "out").exists()
