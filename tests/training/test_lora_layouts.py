"""LoRA adapters in PEFT's and KerasHub's layouts: an adapter trained here gives the same logits
when PEFT applies it to transformers' ViT of the same checkpoint (and KerasHub's ViT), and an
adapter made there gives the same logits here."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.lora import adapter as lora
from tests.support.checkpoints import randomize_hf_model
from tests.support.models import randomize

ARCH = dict(patch_size=4, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32, input_shape=(16, 16, 3))
CLASSES = 3


def logits(model, images):
    return np.asarray(keras.ops.convert_to_numpy(model(images, training=False)))


@pytest.fixture
def images(rng):
    return rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def hf_base(tmp_path_factory):
    """A random transformers `ViTForImageClassification`, saved."""
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=16, patch_size=4,
        num_labels=CLASSES, hidden_act="gelu", layer_norm_eps=1e-6,
    )
    folder = tmp_path_factory.mktemp("hf") / "vit"
    randomize_hf_model(transformers.ViTForImageClassification(config).eval(), seed=3).save_pretrained(folder)
    return folder


def keras_base(weights):
    return keras_vit.VisionTransformer(**ARCH, classes=CLASSES, classifier_activation=None, weights=str(weights))


def peft_logits(hf_base, adapter, images):
    import torch
    import transformers
    from peft import PeftModel

    base = transformers.ViTForImageClassification.from_pretrained(hf_base).eval()
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).logits.numpy()


def test_an_adapter_trained_here_gives_the_same_logits_in_peft(hf_base, images, tmp_path, capsys):
    pytest.importorskip("peft")
    model = keras_base(hf_base)
    base = logits(model, images)
    lora.enable(model, 2, "qkv,out,mlp", alpha=3)
    rng = np.random.default_rng(0)
    for variable in model.trainable_weights:  # as after training: B and the head no longer zero
        variable.assign(0.3 * rng.standard_normal(variable.shape).astype("float32"))
    tuned = logits(model, images)
    assert np.abs(tuned - base).max() > 0.1
    lora.save(model, tmp_path / "run_lora.npz")
    assert main(["export", str(tmp_path / "run_lora.npz"), "--format", "peft", "--output", str(tmp_path / "adapter")]) == 0
    assert "as a PEFT adapter" in capsys.readouterr().out
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["modules_to_save"]) == (2, 3, ["classifier"])
    from safetensors.numpy import load_file

    tensors = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert tensors["base_model.model.vit.layers.1.attention.k_proj.lora_B.weight"].shape == (16, 2)
    assert tensors["base_model.model.vit.layers.0.mlp.fc2.lora_A.weight"].shape == (2, 32)
    np.testing.assert_allclose(peft_logits(hf_base, tmp_path / "adapter", images), tuned, atol=1e-5, rtol=0)
    # and back: the PEFT folder loads here onto the base model
    np.testing.assert_allclose(logits(lora.load(keras_base(hf_base), tmp_path / "adapter"), images), tuned, atol=1e-5)


def test_a_peft_adapter_loads_here_with_the_same_logits(hf_base, images, tmp_path):
    """PEFT's own random adapter on q and v (one rank and alpha each), fc1 and the classifier,
    with rsLoRA: keras_vit fuses q / v into qkv and folds every scale into B."""
    pytest.importorskip("peft")
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = transformers.ViTForImageClassification.from_pretrained(hf_base).eval()
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj", "fc1"], modules_to_save=["classifier"],
                        rank_pattern={"fc1": 3}, alpha_pattern={"v_proj": 7}, use_rslora=True, init_lora_weights=False)
    model = get_peft_model(base, config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "modules_to_save" in name:  # the head, trained too
                p.add_(0.5 * torch.randn(p.shape))
        expected = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).logits.numpy()
    model.save_pretrained(tmp_path / "adapter")
    untuned = logits(keras_base(hf_base), images)
    assert np.abs(expected - untuned).max() > 0.1
    got = logits(lora.load(keras_base(hf_base), tmp_path / "adapter"), images)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("change, message", [
    ({"use_dora": True}, "a PEFT adapter with use_dora; keras_vit reads plain LoRA"),
    ({"peft_type": "IA3"}, "is a PEFT IA3 adapter"),
])
def test_a_peft_adapter_keras_vit_cannot_apply_is_refused_in_one_line(tmp_path, change, message, capsys):
    model = keras_vit.VisionTransformer(**ARCH, classes=CLASSES)
    lora.enable(model, 2)
    lora.save(model, tmp_path / "adapter", layout="peft")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=message):
        lora.load(keras_vit.VisionTransformer(**ARCH, classes=CLASSES), tmp_path / "adapter")
    assert main(["export", str(tmp_path / "adapter"), "--format", "npz", "--output", str(tmp_path / "l.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and not os.path.exists(tmp_path / "l.npz")


def test_kerashub_lora_files_both_ways(tmp_path, images, capsys):
    """keras-hub's own `save_lora_weights` / `load_lora_weights` on its ViT of the same weights."""
    keras_hub = pytest.importorskip("keras_hub")
    backbone = keras_hub.models.ViTBackbone(image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2,
                                            hidden_dim=16, mlp_dim=32)
    hub = randomize(keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=CLASSES, activation=None), 4)
    hub.save_to_preset(str(tmp_path / "preset"))
    base = logits(hub, images)
    np.testing.assert_allclose(logits(keras_base(tmp_path / "preset"), images), base, atol=1e-5)

    # there -> here: every LoRA layer keras-hub has (its attention kernels are per head)
    backbone.enable_lora(2, ["query", "key", "value", "attention_output", "dense_1", "dense_2"])
    rng = np.random.default_rng(1)
    for variable in backbone.trainable_weights:
        if "lora" in variable.path:  # (enable_lora also makes those layers' biases trainable)
            variable.assign(0.3 * rng.standard_normal(variable.shape).astype("float32"))
    expected = logits(hub, images)
    assert np.abs(expected - base).max() > 0.1
    backbone.save_lora_weights(str(tmp_path / "hub.lora.h5"))
    np.testing.assert_allclose(logits(lora.load(keras_base(tmp_path / "preset"), tmp_path / "hub.lora.h5"), images),
                               expected, atol=1e-5)

    # here -> there
    model = keras_base(tmp_path / "preset")
    lora.enable(model, 2, "qkv,out,mlp", alpha=5)
    for variable in model.trainable_weights:
        if "lora" in variable.path:
            variable.assign(0.3 * rng.standard_normal(variable.shape).astype("float32"))
    tuned = logits(model, images)
    lora.save(model, tmp_path / "ours.npz")
    assert main(["export", str(tmp_path / "ours.npz"), "--format", "kerashub", "--output",
                 str(tmp_path / "ours.lora.h5")]) == 0
    loading = ("backbone.enable_lora(4, ['attention_output', 'dense_1', 'dense_2', 'key', 'query', 'value']); "
               "backbone.load_lora_weights(path)")  # rank 4: heads * 2 (keras-hub's B is shared by the heads)
    assert f"KerasHub loads it with {loading}." in capsys.readouterr().out
    fresh = keras_hub.models.ViTImageClassifier.from_preset(str(tmp_path / "preset"))
    fresh.backbone.enable_lora(4, ["query", "key", "value", "attention_output", "dense_1", "dense_2"])
    fresh.backbone.load_lora_weights(str(tmp_path / "ours.lora.h5"))
    np.testing.assert_allclose(logits(fresh, images), tuned, atol=1e-5)


@pytest.mark.parametrize("config, warned", [({"pooling": "avg"}, True), ({"pooling": "token"}, False)])
def test_a_peft_export_says_when_transformers_has_no_model_for_the_runs_base(tmp_path, capsys, config, warned):
    model = keras_vit.VisionTransformer(**ARCH, classes=CLASSES, pooling=config["pooling"])
    lora.enable(model, 2, "qkv", alpha=2)
    lora.save(model, tmp_path / "lora.npz")
    (tmp_path / "config.json").write_text(json.dumps(config))  # as the run wrote it
    assert main(["export", str(tmp_path / "lora.npz"), "--format", "peft", "--output", str(tmp_path / "adapter")]) == 0
    err = capsys.readouterr().err
    assert ("pools by 'avg'" in err and "ViTForImageClassification reads the class token" in err) == warned, err
