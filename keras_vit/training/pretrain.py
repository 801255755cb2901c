"""`pretrain()`: masked patch prediction with `model.fit`, writing an encoder checkpoint.

The run directory (`runs/RECIPE` or `output_dir`) gets `encoder.keras` (the encoder after the
last step: a keras_vit ViT without head, which `weights=` of any builder or recipe loads),
`best.keras` (the encoder of the epoch with the lowest validation loss), the resumable
`checkpoint/`, `config.json` and `log.csv`, as `train()` does.
"""

import dataclasses
import json
import math
import os
import time

import keras

from keras_vit.applications.vision_transformer import VisionTransformer
from keras_vit.training import checkpointing, distribution, fewshot, masked_patch, pipeline, precision, trainer
from keras_vit.training.recipes import TrainConfig, recipe

OBJECTIVE = ("mask_rate", "mask_split", "mask_target", "color_bits")


@dataclasses.dataclass
class PretrainResult:
    """What a pre-training run produced: the encoder (last step) and its validation figures."""

    encoder: keras.Model
    run_dir: str
    encoder_path: str
    val_loss: float
    val_accuracy: float  # of the mean-colour classes on corrupted patches (nan for pixels)
    history: dict
    steps: int
    resumed_from: int
    seconds: float


def build_encoder(config):
    """The ViT of `config` without head (`include_top=False`, the whole token sequence)."""
    size = config.image_size
    return VisionTransformer(
        **config.architecture(),
        include_top=False,
        weights=config.weights,
        input_shape=(size, size, 3),
        pooling=None,
        dropout_rate=config.dropout,
        attention_dropout_rate=config.attention_dropout,
        drop_path_rate=config.drop_path,
        seed=config.seed,
        name=f"vit_{config.recipe}",
    )


def _fingerprint(config, source):
    """The settings a resumed pre-training must share: `train`'s and the objective's."""
    objective = {name: getattr(config, name) for name in OBJECTIVE}
    return {**trainer._fingerprint(config, source), **json.loads(json.dumps(objective))}


def pretrain(config=None, *, data=None, callbacks=(), resume=True, **overrides):
    """Pre-trains a ViT encoder by masked patch prediction; returns a `PretrainResult`.

    Args:
        config: a `TrainConfig` or a recipe name ("masked_patch_digits" by default,
            "masked_patch" for the paper's ViT-B/16 set-up).
        data: optionally data instead of `config.data` (as for `train`; labels are ignored).
        callbacks: more Keras callbacks.
        resume: continue from the checkpoint in the run directory if there is one.
        **overrides: any `TrainConfig` field (`mask_rate`, `mask_split`, `mask_target`,
            `color_bits` set the objective).
    """
    if config is None or isinstance(config, str):
        config = recipe(config or "masked_patch_digits")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig or a recipe name, got {type(config).__name__}.")
    config = config.replace(**overrides)
    started = time.time()
    previous_policy = keras.config.dtype_policy()
    trainer._seed_everything(config)
    if keras.backend.backend() == "torch":
        trainer._torch_cpu_threads()
    plan = distribution.plan(config.strategy, config.model_parallel_size)
    precision.apply_precision(config.precision)
    try:
        with plan.scope():
            return _run(config, plan, data, callbacks, resume, started)
    finally:
        keras.config.set_dtype_policy(previous_policy)


def _run(config, plan, data, extra_callbacks, resume, started):
    source, batch, steps_per_epoch, epochs = trainer.load_and_plan(config, plan, data)

    encoder = build_encoder(config)
    model = masked_patch.build_pretraining_model(encoder, config.mask_target, config.color_bits)
    loss, metrics = masked_patch.loss_and_metrics(config.mask_target)
    model.compile(
        optimizer=trainer.make_optimizer(config, steps_per_epoch * epochs, encoder),
        loss=loss,
        weighted_metrics=metrics,
        jit_compile=config.jit_compile,
    )
    model.optimizer.build(model.trainable_variables)
    state = checkpointing.RunState(
        config.run_dir,
        encoder,
        every_steps=config.checkpoint_every,
        monitor=config.monitor,
        fingerprint=_fingerprint(config, source),
        write=plan.is_chief,
    )
    state.tidy()  # what a run killed while saving left behind
    start = state.restore(model) if resume else 0
    if plan.is_chief:
        os.makedirs(config.run_dir, exist_ok=True)
        if start == 0 and os.path.exists(os.path.join(config.run_dir, "log.csv")):
            os.remove(os.path.join(config.run_dir, "log.csv"))
        checkpointing.write_json(os.path.join(config.run_dir, "config.json"), config.to_dict())
    plan.prepare(model)

    patch = config.image_size // math.isqrt(encoder.get_layer("flatten").output.shape[1])
    corrupt = dict(
        rate=config.mask_rate, split=config.mask_split, target=config.mask_target, bits=config.color_bits,
        seed=config.seed,
    )
    val_ds = masked_patch.corrupt_batches(
        pipeline.eval_dataset(source, config.image_size, batch, crop_fraction=config.eval_crop,
                              pad_to_multiple=plan.pad_multiple, on_corrupt=config.on_corrupt),
        patch, salt=1, **corrupt,
    )

    def train_stream(start_step):
        images = pipeline.train_dataset(
            source, trainer._augmentation(config), batch, seed=config.seed, start=start_step * batch,
            shuffle_buffer=config.shuffle_buffer, shard=plan.shard, deterministic=config.deterministic,
            on_corrupt=config.on_corrupt,
        )
        return masked_patch.corrupt_batches(images, patch, salt=0, start=start_step, **corrupt)

    callbacks = trainer._callbacks(config, plan, state, extra_callbacks)
    callbacks = fewshot.config_callbacks(config, source, encoder, config.run_dir if plan.is_chief else None) + callbacks
    if start and plan.is_chief:
        print(f"Resuming {config.run_dir} at step {start}/{steps_per_epoch * epochs}.")
    history = trainer._fit(model, train_stream, val_ds, state, steps_per_epoch, epochs, callbacks,
                           config.verbose if plan.is_chief else 0)
    encoder_path = os.path.join(config.run_dir, "encoder.keras")
    if plan.is_chief:
        checkpointing.save_model_atomic(encoder, encoder_path)
    results = model.evaluate(val_ds, verbose=0, return_dict=True)
    return PretrainResult(
        encoder=encoder,
        run_dir=config.run_dir,
        encoder_path=encoder_path,
        val_loss=float(results["loss"]),
        val_accuracy=float(results.get("accuracy", math.nan)),
        history=history,
        steps=state.step,
        resumed_from=start,
        seconds=time.time() - started,
    )
