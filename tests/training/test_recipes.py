"""Recipes, overrides, schedules, optimizers, precision and strategy selection."""

import math

import keras
import numpy as np
import pytest

from keras_vit.training import optim, precision
from keras_vit.training.parallel import distribution
from keras_vit.training.recipes import RECIPES, TrainConfig, parse_value, recipe
from keras_vit.training.engine import schedule_steps


def test_finetune_recipe_is_the_papers():
    config = recipe("finetune")
    assert (config.optimizer, config.momentum, config.weight_decay, config.clipnorm) == ("sgd", 0.9, 0.0, 1.0)
    assert (config.schedule, config.warmup_steps, config.image_size, config.batch_size) == ("cosine", 500, 384, 512)
    assert config.crop_area == (0.05, 1.0) and config.flip and config.weights == "imagenet21k"
    scratch = recipe("scratch")
    assert scratch.optimizer == "adamw" and scratch.weight_decay > 0 and scratch.label_smoothing > 0
    assert scratch.drop_path > 0 and scratch.schedule == "cosine" and scratch.warmup_steps > 0
    assert set(RECIPES) == {"finetune", "scratch", "deit3", "digits", "masked_patch", "masked_patch_digits"}


def test_masked_patch_recipe_is_the_papers():
    config = recipe("masked_patch")  # App. B.1.2
    assert (config.optimizer, config.learning_rate, config.batch_size, config.steps) == ("adam", 2e-4, 4096, 1_000_000)
    assert (config.schedule, config.warmup_steps) == ("cosine", 10_000)
    assert (config.mask_rate, config.mask_split, config.mask_target, config.color_bits) == (0.5, (0.8, 0.1, 0.1), "color", 3)
    digits, small = recipe("digits").architecture(), recipe("masked_patch_digits")
    assert small.architecture() == digits and small.image_size == recipe("digits").image_size
    assert recipe("digits").override(["mask_split=0.6,0.2,0.2"]).mask_split == (0.6, 0.2, 0.2)


def test_every_field_overridable_from_python_and_strings():
    config = recipe("digits", learning_rate=0.5, flip=True)
    assert config.learning_rate == 0.5 and config.flip and config.recipe == "digits"
    config = config.override(["batch_size=32", "crop-area=0.2,0.9", "clipnorm=none", "jit_compile=false", "verbose=2"])
    assert config.batch_size == 32 and config.crop_area == (0.2, 0.9) and config.clipnorm is None
    assert config.jit_compile is False and config.verbose == 2
    assert parse_value("jit_compile", "auto") == "auto" and parse_value("weights", "none") is None
    with pytest.raises(ValueError, match="Unknown training option"):
        config.override(["learning_rat=1"])
    with pytest.raises(ValueError, match="Bad value for epochs"):
        config.override(["epochs=many"])
    with pytest.raises(ValueError, match="key=value"):
        config.override(["epochs"])


def test_config_validation():
    with pytest.raises(ValueError, match="divisible by accumulation_steps"):
        recipe("digits", batch_size=64, accumulation_steps=3)
    with pytest.raises(ValueError, match="model='custom' needs"):
        TrainConfig(model="custom", patch_size=4)
    with pytest.raises(ValueError, match="model='ViTX'"):
        TrainConfig(model="ViTX")
    arch = recipe("finetune", depth=2).architecture()
    assert arch["depth"] == 2 and arch["hidden_dim"] == 768


@pytest.mark.parametrize(
    "field, bad, good",
    [
        ("learning_rate", -1.0, 0.0),  # 0: keep the initial weights (a check)
        ("learning_rate", float("nan"), 1.0),
        ("val_fraction", 1.0, 0.5),
        ("val_fraction", 0.0, None),
        ("warmup_steps", -1, 0),
        ("momentum", 1.5, 0.0),
        ("label_smoothing", 1.0, 0.0),
        ("drop_path", -0.1, 0.9),
        ("eval_crop", 0.0, 1.0),
        ("weight_decay", -0.05, 0.0),
        ("clipnorm", -1.0, None),
        ("batch_size", 0, 1),
        ("steps", 0, None),
        ("checkpoint_every", -1, 0),
        ("seed", -1, 0),
        ("hidden_dim", 0, 8),
    ],
)
def test_meaningless_values_are_refused_for_python_and_command_line(field, bad, good):
    with pytest.raises(ValueError, match=rf"^{field}=.* must be in [\[(].*[\])]\.$"):
        recipe("digits", **{field: bad})
    with pytest.raises(ValueError, match=rf"^{field}="):
        recipe("digits").override([f"{field}={bad}"])
    assert getattr(recipe("digits", **{field: good}), field) == good
    with pytest.raises(ValueError, match="learning_rate='fast' must be a number"):
        recipe("digits", learning_rate="fast")


def test_steps_per_epoch_and_epochs():
    config = recipe("digits", batch_size=64)
    assert schedule_steps(config, 1438) == (22, 40, 880)
    config = recipe("digits", batch_size=64, accumulation_steps=4)  # micro-batch 16
    assert schedule_steps(config, 1438) == (88, 40, 3520)
    config = recipe("finetune", steps=1000, batch_size=512, accumulation_steps=2)
    per_epoch, epochs, total = schedule_steps(config, 50_000)  # CIFAR-10: 195 micro-steps per epoch
    assert per_epoch % 2 == 0 and total == 2000 and (epochs - 1) * per_epoch < total <= epochs * per_epoch


@pytest.mark.parametrize("steps, examples", [(200, 1438), (5, 200), (7, 64), (1, 10_000), (333, 1000)])
def test_steps_means_that_many_optimizer_steps(steps, examples):
    """`--steps 200` on digits ran 207 (rounded up to whole epochs): now exactly 200, the last epoch shorter."""
    for accumulation in (1, 4):
        config = recipe("digits", batch_size=64, accumulation_steps=accumulation, steps=steps)
        per_epoch, epochs, total = schedule_steps(config, examples)
        assert total == steps * accumulation and per_epoch % accumulation == 0
        assert (epochs - 1) * per_epoch < total <= epochs * per_epoch


def test_warmup_cosine_schedule_values():
    schedule = optim.WarmupSchedule(0.1, total_steps=100, warmup_steps=10, decay="cosine")
    lr = [float(schedule(step)) for step in range(100)]
    np.testing.assert_allclose(lr[:10], [0.1 * (s + 1) / 10 for s in range(10)], rtol=1e-6)
    expected = [0.05 * (1 + math.cos(math.pi * (s - 10) / 90)) for s in range(10, 100)]
    np.testing.assert_allclose(lr[10:], expected, rtol=1e-5, atol=1e-7)
    linear = optim.WarmupSchedule(1.0, 20, 0, decay="linear")
    assert float(linear(10)) == pytest.approx(0.5)
    clone = optim.WarmupSchedule.from_config(schedule.get_config())
    assert float(clone(42)) == pytest.approx(lr[42])
    with pytest.raises(ValueError, match="warmup_steps"):
        optim.WarmupSchedule(0.1, 10, 20)


def test_schedule_under_accumulation_counts_optimizer_updates():
    schedule = optim.WarmupSchedule(0.1, total_steps=10, warmup_steps=3)
    optimizer = optim.build_optimizer("sgd", schedule, accumulation_steps=4)
    per_update = optimizer._learning_rate
    # update n is applied at Keras' micro-batch counter 4n + 3
    assert [float(per_update(4 * n + 3)) for n in range(10)] == pytest.approx([float(schedule(n)) for n in range(10)])
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(per_update))
    assert float(clone(4 * 5 + 3)) == pytest.approx(float(schedule(5)))
    assert optim.build_optimizer("sgd", schedule)._learning_rate is schedule


def test_learning_rate_scaling():
    assert optim.scaled_learning_rate(1e-3, 4096, 1024, "linear") == pytest.approx(4e-3)
    assert optim.scaled_learning_rate(1e-3, 4096, 1024, "sqrt") == pytest.approx(2e-3)
    assert optim.scaled_learning_rate(1e-3, 4096, 1024, "none") == 1e-3
    with pytest.raises(ValueError, match="lr_scaling"):
        optim.scaled_learning_rate(1e-3, 1, 1, "cubic")


def test_optimizers_of_the_recipes():
    sgd = optim.build_optimizer("sgd", 0.01, momentum=0.9, clipnorm=1.0, accumulation_steps=4)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.global_clipnorm == 1.0
    assert sgd.momentum == 0.9 and sgd.gradient_accumulation_steps == 4 and not sgd.weight_decay
    adamw = optim.build_optimizer("adamw", 1e-3, weight_decay=0.05)
    assert isinstance(adamw, keras.optimizers.AdamW) and adamw.weight_decay == 0.05
    decayed = keras.Variable(np.ones((2, 2)), name="kernel")
    bias = keras.Variable(np.ones(2), name="bias")
    pos = keras.Variable(np.ones((1, 3, 2)), name="pos_embedding")
    adamw.build([decayed, bias, pos])
    assert adamw._use_weight_decay(decayed)
    assert not adamw._use_weight_decay(bias) and not adamw._use_weight_decay(pos)
    with pytest.raises(ValueError, match="optimizer='nadam'"):
        optim.build_optimizer("nadam", 1e-3)


def test_auto_precision_by_hardware(monkeypatch):
    assert precision.resolve_precision("float32") == "float32"
    cases = {("tpu", None): "mixed_bfloat16", ("gpu", (8, 0)): "mixed_bfloat16", ("gpu", (9, 0)): "mixed_bfloat16",
             ("gpu", (7, 5)): "mixed_float16", ("gpu", (6, 0)): "mixed_float16"}
    for device, expected in cases.items():
        monkeypatch.setattr(precision, "accelerator", lambda device=device: device)
        assert precision.resolve_precision("auto") == expected
    monkeypatch.setattr(precision, "accelerator", lambda: ("cpu", None))
    cpu_bf16 = "float32" if keras.backend.backend() == "jax" else "mixed_bfloat16"
    for has_bf16, expected in ((True, cpu_bf16), (False, "float32")):
        monkeypatch.setattr(precision, "cpu_has_bfloat16", lambda has_bf16=has_bf16: has_bf16)
        assert precision.resolve_precision("auto") == expected
    with pytest.raises(ValueError, match="precision='half'"):
        precision.resolve_precision("half")


def test_cpu_bfloat16_detection_reads_cpuinfo():
    with open("/proc/cpuinfo") as handle:
        flags = handle.read()
    precision.cpu_has_bfloat16.cache_clear()
    assert precision.cpu_has_bfloat16() == any(f in flags.split() for f in ("avx512_bf16", "amx_bf16", "bf16"))


def test_strategy_names_are_checked_per_backend():
    backend = keras.backend.backend()
    assert distribution.plan("none").name == "none"
    assert distribution.plan("auto").name in ("none", "data_parallel")
    other = {"tensorflow": "torch_ddp", "jax": "mirrored", "torch": "data_parallel"}[backend]
    with pytest.raises(ValueError, match=f"not available on the {backend} backend.*another backend"):
        distribution.plan(other)
    with pytest.raises(ValueError, match="expected one of"):
        distribution.plan("horovod")
    plan = distribution.Plan("x", replicas=4)
    assert plan.per_process_batch(64) == 64
    with pytest.raises(ValueError, match="not divisible by the 4 replicas"):
        plan.per_process_batch(30)
    assert distribution.Plan("ddp", replicas=2, shard=(2, 1)).per_process_batch(64) == 32
