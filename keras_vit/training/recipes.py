"""Training recipes: named `TrainConfig`s whose every field can be overridden.

- "finetune": the paper's fine-tuning (App. B.1.1): SGD momentum 0.9, no weight decay,
  batch 512, global-norm clipping 1.0, cosine decay with 500 warm-up steps, 384 px,
  inception crop + flip, the head zero-initialised (the builders do that), starting from
  pretrained weights (`weights=`). The paper sweeps lr over {0.001, 0.003, 0.01, 0.03}
  and trains 10k steps on CIFAR (20k on ImageNet, 500 on Pets / Flowers).
- "scratch": training from scratch on ImageNet-size data in the DeiT / "How to train your
  ViT" style: AdamW, weight decay 0.05, warm-up + cosine, label smoothing 0.1, stochastic
  depth 0.1, RandAugment, MixUp / CutMix.
- "deit3": DeiT III (Touvron et al., 2022) on ImageNet-1k at 192 px (fine-tuned at 224 afterwards
  in the paper): LAMB lr 3e-3 at batch 2048, weight decay 0.02, 5 warm-up epochs, 800 epochs,
  binary cross-entropy on MixUp 0.8 / CutMix 1.0 targets, simple random crop + flip, 3-Augment,
  colour jitter 0.3, repeated augmentation x3, LayerScale 1e-6 (timm's `deit3_*`), stochastic
  depth by size (`BY_WIDTH`), no label smoothing, test crop 1.0.
- "digits": the quick default: a small ViT (16 px = the 8x8 digits upscaled 2x, patch 4, width
  64, depth 4, average pooling) on scikit-learn's digits, ~97% in 40 short epochs.
- "masked_patch": the paper's self-supervised pre-training (App. B.1.2, `keras-vit pretrain`):
  masked patch prediction, Adam lr 2e-4, batch 4096, 1M steps, 10k warm-up steps, cosine
  (on ImageNet by default; the paper pre-trained on JFT-300M).
- "masked_patch_digits": the same objective for the digits architecture (2000 short steps).

    config = recipe("finetune", data="cifar10", learning_rate=0.01)
    config = recipe("digits").override(["epochs=5", "precision=mixed_bfloat16"])
"""

from keras_vit.training.config import (  # noqa: F401  (the names other modules import from here)
    LR_SCALINGS, MASK_TARGETS, OPTIMIZERS, PRECISIONS, SCHEDULES, STRATEGIES, TrainConfig, check_decay, parse_value,
)


# The small ViT and input of the `digits` recipes (supervised and masked patch prediction).
_DIGITS_VIT = dict(
    model="custom",
    patch_size=4,
    hidden_dim=64,
    depth=4,
    num_heads=4,
    mlp_dim=128,
    data="digits",
    image_size=16,
    crop_area=(0.8, 1.0),
    crop_aspect=(0.8, 1.25),
    flip=False,
)

RECIPES = {
    "finetune": dict(
        model="ViTB16",
        data="cifar10",
        image_size=384,
        batch_size=512,
        steps=10_000,
        optimizer="sgd",
        momentum=0.9,
        learning_rate=0.003,
        weight_decay=0.0,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=500,
        crop_area=(0.05, 1.0),
        flip=True,
        weights="imagenet21k",
        precision="auto",
    ),
    "scratch": dict(
        model="ViTB16",
        data="imagenet2012",
        image_size=224,
        eval_crop=0.875,
        batch_size=1024,
        epochs=300,
        optimizer="adamw",
        learning_rate=1e-3,
        lr_scaling="linear",
        reference_batch_size=1024,
        weight_decay=0.05,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=6_000,
        label_smoothing=0.1,
        dropout=0.0,
        drop_path=0.1,
        randaugment_ops=2,
        randaugment_factor=0.5,
        mixup=0.8,
        cutmix=1.0,
        precision="auto",
    ),
    "deit3": dict(
        model="ViTB16",
        data="imagenet2012",
        image_size=192,
        eval_crop=1.0,
        batch_size=2048,
        epochs=800,
        optimizer="lamb",
        learning_rate=3e-3,
        lr_scaling="linear",
        reference_batch_size=2048,
        weight_decay=0.02,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=3_130,
        loss="bce",
        drop_path=0.2,
        layer_scale_init=1e-6,
        crop="simple",
        flip=True,
        three_augment=True,
        color_jitter=0.3,
        mixup=0.8,
        cutmix=1.0,
        repeated_augment=3,
        precision="auto",
    ),
    "digits": dict(
        **_DIGITS_VIT,
        pooling="avg",
        batch_size=64,
        epochs=40,
        optimizer="adamw",
        learning_rate=2e-3,
        reference_batch_size=64,
        weight_decay=0.05,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=50,
        label_smoothing=0.1,
        drop_path=0.1,
        shuffle_buffer=2_000,
        precision="float32",
    ),
    "masked_patch": dict(
        model="ViTB16",
        data="imagenet2012",
        image_size=224,
        batch_size=4096,
        steps=1_000_000,
        optimizer="adam",
        learning_rate=2e-4,
        weight_decay=0.0,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=10_000,
        crop_area=(0.05, 1.0),
        flip=True,
        monitor="val_loss",
        precision="auto",
    ),
    "masked_patch_digits": dict(
        **_DIGITS_VIT,
        batch_size=64,
        steps=2_000,
        optimizer="adam",
        learning_rate=1e-3,
        reference_batch_size=64,
        weight_decay=0.0,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=100,
        shuffle_buffer=2_000,
        monitor="val_loss",
        precision="float32",
    ),
}


# A recipe's values that depend on the model's size, by its width: `{recipe: {field: {hidden_dim: value}}}`,
# taken unless the field is given. DeiT III's stochastic depth of ViT-S / B / L (its configs as ported to
# mmpretrain and EasyCV); other widths keep the recipe's value.
BY_WIDTH = {"deit3": {"drop_path": {384: 0.05, 768: 0.2, 1024: 0.45}}}

# The recipes of `pretrain()` (`keras-vit pretrain`); the others are `train()`'s.
PRETRAINING = ("masked_patch", "masked_patch_digits")


def recipe(name="digits", **overrides):
    """The `TrainConfig` of recipe `name` with `overrides` applied."""
    if name not in RECIPES:
        raise ValueError(f"Unknown recipe {name!r}; expected one of {sorted(RECIPES)}.")
    config = TrainConfig(**{**RECIPES[name], "recipe": name}).replace(**overrides)
    width = config.architecture().get("hidden_dim")
    sized = {field: by_width[width] for field, by_width in BY_WIDTH.get(name, {}).items()
             if field not in overrides and width in by_width}
    return config.replace(**sized) if sized else config


def check_recipe_command(name, command):
    """Raises ValueError (naming the right one) if recipe `name` is not run by `command`
    ("train" or "pretrain"); a config of no recipe ("custom") goes with either."""
    if name not in RECIPES:
        return
    right = "pretrain" if name in PRETRAINING else "train"
    if right != command:
        kind = "pre-training" if right == "pretrain" else "supervised"
        raise ValueError(
            f"Recipe {name!r} is a {kind} recipe: run it with keras_vit.training.{right}() "
            f"(keras-vit {right}), not {command}()."
        )


def recipe_table():
    """The Markdown table of what each recipe sets (a blank cell: the field's default), for the documentation."""
    import dataclasses

    names = list(RECIPES)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    rows = [name for name in defaults if any(name in RECIPES[r] for r in names)]
    lines = [f"| field (default) | {' | '.join(f'`{r}`' for r in names)} |", "|---" * (len(names) + 1) + "|"]
    for field in rows:
        cells = [f"`{RECIPES[r][field]}`" if field in RECIPES[r] else "" for r in names]
        lines.append(f"| `{field}` (`{defaults[field]}`) | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"
