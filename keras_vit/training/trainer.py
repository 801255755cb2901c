"""`train()`: a recipe, data and a ViT -> `model.fit` with checkpoints, logs and resumption."""

import dataclasses
import importlib.util
import json
import math
import os
import sys
import time
import warnings

import keras

from keras_vit.applications.vision_transformer import VisionTransformer
from keras_vit.training import checkpointing, distribution, fewshot, layer_decay, lora, optim, pipeline, precision
from keras_vit.training.data import load_source
from keras_vit.training.heads import logits_model
from keras_vit.training.recipes import TrainConfig, recipe

# Settings a resumed run must share with the run that wrote the checkpoint.
FINGERPRINT = (
    "data", "model", "patch_size", "hidden_dim", "depth", "num_heads", "mlp_dim",
    "image_size", "batch_size", "accumulation_steps", "seed", "optimizer",
)


@dataclasses.dataclass
class TrainResult:
    """What a run produced: the model (best weights), paths, its validation metrics, history."""

    model: keras.Model
    run_dir: str
    best_path: str
    final_path: str
    top1: float
    top5: float
    val_loss: float
    best_epoch: int
    history: dict
    steps: int
    resumed_from: int
    seconds: float
    precision: str
    strategy: str


def build_model(config, num_classes):
    """The ViT of `config` with a `num_classes` head (softmax output), pretrained if `weights`."""
    size = config.image_size
    return VisionTransformer(
        **config.architecture(),
        include_top=True,
        weights=config.weights,
        input_shape=(size, size, 3),
        pooling=config.pooling,
        classes=num_classes,
        classifier_activation="softmax",
        dropout_rate=config.dropout,
        attention_dropout_rate=config.attention_dropout,
        drop_path_rate=config.drop_path,
        representation_size=config.representation_size,
        seed=config.seed,
        remat=config.remat,
        name=f"vit_{config.recipe}",
    )


def loss_and_metrics(num_classes, one_hot, from_logits, label_smoothing):
    k = min(5, num_classes)
    if one_hot:
        loss = keras.losses.CategoricalCrossentropy(from_logits=from_logits, label_smoothing=label_smoothing)
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy"), keras.metrics.TopKCategoricalAccuracy(k, name="top5")]
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
        metrics = [
            keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            keras.metrics.SparseTopKCategoricalAccuracy(k, name="top5"),
        ]
    return loss, metrics


def schedule_steps(config, examples):
    """`(steps_per_epoch, epochs)` in fit steps (micro-batches), whole optimizer steps each."""
    acc = config.accumulation_steps
    per_epoch = max(acc, (examples // config.micro_batch_size) // acc * acc)
    if config.steps is None:
        return per_epoch, config.epochs
    micro_total = config.steps * acc
    epochs = max(1, round(micro_total / per_epoch))
    per_epoch = math.ceil(micro_total / epochs / acc) * acc
    return per_epoch, epochs


def _seed_everything(config):
    keras.utils.set_random_seed(config.seed)
    if not config.deterministic:
        return
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    if keras.backend.backend() == "torch":
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)


def _torch_cpu_threads():
    """On CPU, PyTorch's OpenMP threads busy-wait for each other; when the tf.data pipeline
    takes a core from them every op stalls (10-30x slower steps). Leave it one core unless
    OMP_NUM_THREADS says otherwise."""
    import torch

    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) - 1)))


def _write_metadata(run_dir, config, source, data):
    os.makedirs(run_dir, exist_ok=True)
    recorded = config.to_dict()
    if data is not None:  # given to train() directly: a name or path is reloadable, arrays are not
        recorded["data"] = os.fspath(data) if isinstance(data, (str, os.PathLike)) else None
    checkpointing.write_json(os.path.join(run_dir, "config.json"), recorded)
    checkpointing.write_json(
        os.path.join(run_dir, "classes.json"),
        {"class_names": source.class_names, "image_size": config.image_size, "eval_crop": config.eval_crop},
    )


def _callbacks(config, plan, state, extra):
    callbacks = [checkpointing.StopOnNaN(state, advice=_nan_advice(config)), state]
    if plan.is_chief:
        callbacks.append(keras.callbacks.CSVLogger(os.path.join(config.run_dir, "log.csv"), append=True))
        if config.tensorboard and importlib.util.find_spec("tensorboard") is not None:
            callbacks.append(keras.callbacks.TensorBoard(os.path.join(config.run_dir, "tensorboard")))
        elif config.tensorboard:
            warnings.warn("TensorBoard logs skipped: the `tensorboard` package is not installed.", stacklevel=3)
    return callbacks + list(extra)


def _nan_advice(config):
    return (
        f"lower the learning rate (now {config.learning_rate}), keep clipnorm on, or use "
        f"precision='float32' (now {config.precision!r})"
    )


def _merge(history, more):
    for key, values in more.items():
        history.setdefault(key, []).extend(float(v) for v in values)


def train(config=None, *, model=None, data=None, callbacks=(), resume=True, **overrides):
    """Trains a ViT; returns a `TrainResult`. Rerun with the same settings to resume.

    Args:
        config: a `TrainConfig` or a recipe name ("digits" by default, "finetune", "scratch").
        model: optionally a ready `keras.Model` (images in, class probabilities or logits out)
            instead of the one the config describes.
        data: optionally data instead of `config.data`: NumPy `(x, y)` or
            `((x_train, y_train), (x_val, y_val))`, a folder, a tfds name or "digits".
        callbacks: more Keras callbacks.
        resume: continue from the checkpoint in the run directory if there is one.
        **overrides: any `TrainConfig` field.
    """
    if config is None or isinstance(config, str):
        config = recipe(config or "digits")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig or a recipe name, got {type(config).__name__}.")
    config = config.replace(**overrides)
    started = time.time()
    previous_policy = keras.config.dtype_policy()
    _seed_everything(config)
    if keras.backend.backend() == "torch":
        _torch_cpu_threads()
    plan = distribution.plan(config.strategy, config.model_parallel_size)
    policy = precision.apply_precision(config.precision)
    try:
        with plan.scope():
            return _run(config, plan, policy, model, data, callbacks, resume, started)
    finally:
        keras.config.set_dtype_policy(previous_policy)


def load_and_plan(config, plan, data):
    """`(source, per-process batch, steps per epoch, epochs)` of a run: the data source of
    the recipe (or `data`) and the steps every process takes."""
    source = load_source(
        config.data if data is None else data,
        data_dir=config.data_dir,
        manual_dir=config.manual_dir,
        download=config.download,
        train_split=config.train_split,
        val_split=config.val_split,
        val_fraction=config.val_fraction,
        on_corrupt=config.on_corrupt,
        seed=config.seed,
    )
    batch = plan.per_process_batch(config.micro_batch_size)
    shards = plan.shard[0]  # every process plans with the smallest shard: the same steps everywhere
    examples = pipeline.shard_size(source.train_size, shards, shards - 1) * shards
    return (source, batch, *schedule_steps(config, examples))


def _run(config, plan, policy, model, data, extra_callbacks, resume, started):
    source, batch, steps_per_epoch, epochs = load_and_plan(config, plan, data)
    augmentation = _augmentation(config)
    one_hot = config.label_smoothing > 0 or augmentation.mixes_labels

    if model is None:
        model = build_model(config, source.num_classes)
    elif tuple(model.inputs[0].shape[1:3]) not in ((config.image_size,) * 2, (None, None)):
        raise ValueError(
            f"The model takes {tuple(model.inputs[0].shape[1:])} images but image_size={config.image_size}."
        )
    lora.apply_config(config, model)
    train_model = _compile(config, model, source.num_classes, one_hot, steps_per_epoch * epochs)
    state = checkpointing.RunState(
        config.run_dir,
        model,
        every_steps=config.checkpoint_every,
        monitor=config.monitor,
        fingerprint=_fingerprint(config, source),
        write=plan.is_chief,
    )
    state.tidy()  # what a run killed while saving left behind
    start = state.restore(train_model) if resume else 0
    if plan.is_chief:
        if start == 0 and os.path.exists(os.path.join(config.run_dir, "log.csv")):
            os.remove(os.path.join(config.run_dir, "log.csv"))
        _write_metadata(config.run_dir, config, source, data)
    plan.prepare(train_model)

    val_ds = pipeline.eval_dataset(
        source, config.image_size, batch, one_hot=one_hot, crop_fraction=config.eval_crop,
        pad_to_multiple=plan.pad_multiple, on_corrupt=config.on_corrupt,
    )

    def train_stream(start_step):
        return pipeline.train_dataset(
            source, augmentation, batch, one_hot=one_hot, seed=config.seed, start=start_step * batch,
            shuffle_buffer=config.shuffle_buffer, shard=plan.shard, deterministic=config.deterministic,
            on_corrupt=config.on_corrupt,
        )

    callbacks = _callbacks(config, plan, state, extra_callbacks)
    callbacks = fewshot.config_callbacks(config, source, model, config.run_dir if plan.is_chief else None) + callbacks
    if start and plan.is_chief:
        print(f"Resuming {config.run_dir} at step {start}/{steps_per_epoch * epochs} "
              f"(epoch {start // steps_per_epoch + 1}).")
    history = _fit(train_model, train_stream, val_ds, state, steps_per_epoch, epochs, callbacks,
                   fit_verbosity(config.verbose) if plan.is_chief else 0)
    if config.lora_rank and plan.is_chief:
        lora.save(model, os.path.join(config.run_dir, "lora.npz"))
    return _finish(config, plan, policy, model, train_model, state, val_ds, history, start, started)


def _augmentation(config):
    return pipeline.Augmentation(
        config.image_size,
        crop_area=config.crop_area,
        crop_aspect=config.crop_aspect,
        flip=config.flip,
        randaugment_ops=config.randaugment_ops,
        randaugment_factor=config.randaugment_factor,
        mixup=config.mixup,
        cutmix=config.cutmix,
    )


def _fingerprint(config, source):
    fingerprint = {k: getattr(config, k) for k in FINGERPRINT}
    fingerprint["data"] = source.name
    return json.loads(json.dumps(fingerprint))  # as it reads back from state.json


def _compile(config, model, num_classes, one_hot, total_steps):
    """Compiles the logits model of `model` with the recipe's optimizer, schedule and loss."""
    train_model, from_logits = logits_model(model)
    loss, metrics = loss_and_metrics(num_classes, one_hot, from_logits, config.label_smoothing)
    train_model.compile(optimizer=make_optimizer(config, total_steps, model), loss=loss, metrics=metrics, jit_compile=config.jit_compile)
    train_model.optimizer.build(train_model.trainable_variables)
    return train_model


def make_optimizer(config, total_steps, model):
    """The recipe's optimizer with its warm-up + decay schedule over `total_steps` fit steps
    (and, with `layer_decay`, per-variable learning-rate scales for `model`)."""
    total_updates = total_steps // config.accumulation_steps
    peak = optim.scaled_learning_rate(config.learning_rate, config.batch_size, config.reference_batch_size, config.lr_scaling)
    schedule = optim.WarmupSchedule(peak, total_updates, min(config.warmup_steps, total_updates), config.schedule)
    return optim.build_optimizer(
        config.optimizer,
        schedule,
        momentum=config.momentum,
        beta_1=config.beta_1,
        beta_2=config.beta_2,
        weight_decay=config.weight_decay,
        clipnorm=config.clipnorm,
        accumulation_steps=config.accumulation_steps,
        lr_scales=None if config.layer_decay is None else layer_decay.layer_scales(model, config.layer_decay),
    )


def fit_verbosity(verbose):
    """`fit`'s `verbose`: "auto" is Keras' progress bar on a terminal or in a notebook, and one
    line per epoch (2) where stdout is a file or a pipe (CI, nohup), where a bar is redrawn."""
    if verbose != "auto":
        return verbose
    return 1 if sys.stdout.isatty() or "ipykernel" in sys.modules else 2


def _fit(train_model, train_stream, val_ds, state, steps_per_epoch, epochs, callbacks, verbose):
    """`fit` from `state.step` to the end; a run resumed mid-epoch first finishes that epoch."""
    history, done, total = {}, state.step, steps_per_epoch * epochs
    while done < total:
        epoch, within = divmod(done, steps_per_epoch)
        fitted = train_model.fit(
            train_stream(done), epochs=epoch + 1 if within else epochs, initial_epoch=epoch,
            steps_per_epoch=steps_per_epoch - within, validation_data=val_ds, callbacks=callbacks,
            verbose=verbose, shuffle=False,
        )
        _merge(history, fitted.history)
        if state.step == done or train_model.stop_training:  # a callback stopped the run
            break
        done = state.step
    return history


def _finish(config, plan, policy, model, train_model, state, val_ds, history, start, started):
    final_path = os.path.join(config.run_dir, "final.keras")
    if plan.is_chief:
        checkpointing.save_model_atomic(model, final_path)
    if plan.name == "torch_ddp":
        from keras_vit.training import torch_ddp

        torch_ddp.barrier()
    if os.path.exists(state.best_path):
        model.load_weights(state.best_path)
    results = train_model.evaluate(val_ds, verbose=0, return_dict=True)
    return TrainResult(
        model=model,
        run_dir=config.run_dir,
        best_path=state.best_path if os.path.exists(state.best_path) else final_path,
        final_path=final_path,
        top1=float(results["accuracy"]),
        top5=float(results["top5"]),
        val_loss=float(results["loss"]),
        best_epoch=state.best_epoch or 0,
        history=history,
        steps=state.step,
        resumed_from=start,
        seconds=time.time() - started,
        precision=policy,
        strategy=plan.name,
    )
