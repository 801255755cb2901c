"""The run engine: what every kind of training run shares, written once.

A `Task` says what is trained: the model and its loss (`setup`), how batches are made from the
data (`Setup.transform`), what a resumed run must share (`resume_fields`), what else the run
folder records (`metadata`) and what the run returns (`finish`). `run(task, config)` does the
rest: the recipe and its checks, seeding, precision, the distribution plan, loading the data and
planning the steps, the optimizer, the run folder, resuming, the NaN guard, the callbacks, the
verbosity, and saving (`Run.save`, the one save path).
"""

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import sys
import time
import warnings
from typing import Any, Callable, Optional

import keras

from keras_vit import run_folder
from keras_vit import applications
from keras_vit.applications.vision_transformer import VisionTransformer
from keras_vit.utils.files import one_line_errors, regular_file, write_json, write_text
from keras_vit.data import naflex as naflex_pipeline, pipeline
from keras_vit.data.sources import load_source
from keras_vit.lora import adapter as lora
from keras_vit.preprocessing import DEFAULT as DEFAULT_PREPROCESSING, name_of as preprocessing_name
from keras_vit.training import checkpointing, ema, fewshot_callback, layer_decay, optim, precision
from keras_vit.training.parallel import distribution, hosts, run_agreement
from keras_vit.training.config import MODEL as MODEL_GROUP
from keras_vit.training.recipes import TrainConfig, check_recipe_command, recipe

# Settings a resumed run must share with the run that wrote the checkpoint: these, every field of the
# model group (`fingerprint_fields`) and a task's own. Not its length: a finished run given more steps or
# epochs continues to them (on the longer schedule).
FINGERPRINT = ("data", "image_size", "batch_size", "accumulation_steps", "seed", "optimizer", "ema_decay")
# The model group's fields a resumed run may change: the weights it started from (the checkpoint's are
# loaded over them) and the regularisation, like the learning rate.
RESUMABLE = ("weights", "dropout", "attention_dropout", "drop_path", "patch_drop_rate", "remat")


@dataclasses.dataclass
class Setup:
    """A task's part of a run, made once the data is known."""

    model: keras.Model  # what is checkpointed and saved: the run's weights
    train_model: keras.Model  # what `fit` trains: `model`, or a model around it
    compile: dict  # `loss` and `metrics` (or `weighted_metrics`) of `train_model.compile`
    one_hot: bool = False  # labels as one-hot vectors (label smoothing, MixUp / CutMix)
    # `train_model`'s step takes uint8 training batches and scales (and mixes) them itself
    # (`on_step.TrainingModel`); False: the host scales them (the model's preprocessing)
    on_step: bool = False
    # `(dataset, salt, start_step) -> dataset` applied to the training (salt 0) and validation
    # (salt 1) batches, e.g. corrupting patches; None: the labelled batches as they are.
    transform: Optional[Callable[[Any, int, int], Any]] = None
    backbone: Optional[keras.Model] = None  # the ViT whose blocks `layer_decay` scales; None: `model`


@dataclasses.dataclass(kw_only=True)
class RunResult:
    """What every run's `Task.finish` returns; a task's result adds its scores (keyword fields)."""

    model: keras.Model  # the best weights
    run_dir: str
    best_path: str
    final_path: str
    best_epoch: int
    history: dict
    steps: int
    resumed_from: int
    seconds: float
    precision: str
    strategy: str
    is_chief: bool = True  # this process wrote the files (the others of a multi-process run did not)


class Task:
    """A kind of run; subclasses say what differs (see the module docstring)."""

    command = "train"  # the function and `keras-vit` command that runs it
    default_recipe = "digits"
    resume_fields = ()  # config fields a resumed run must share, beyond `FINGERPRINT`
    own_scaling = False  # its pipelines scale images by the model's preprocessing (else to [-1, 1])

    def setup(self, config, source, augmentation):
        """The `Setup` of the run: models, loss and metrics, label format, batch transform."""
        raise NotImplementedError

    def logged(self, config):
        """The names of the training metrics the epoch logs hold (each also as `val_NAME`)."""
        return ("loss",)

    def load_source(self, config, data):
        """The run's data: `data` if given, else the config's (`keras_vit.data.sources.load_source`)."""
        return load_source(
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

    def batches(self, config, plan, source, augmentation, batch, setup):
        """`(validation batches, start_step -> training batches)` of `source` for this process
        (`keras_vit.data.pipeline`'s labelled images)."""
        val_ds = pipeline.eval_dataset(
            source, config.image_size, batch, one_hot=setup.one_hot, crop_fraction=config.eval_crop,
            pad_to_multiple=plan.pad_multiple, part=plan.part, on_corrupt=config.on_corrupt, preprocessing=preprocessing_name(setup.model),
        )

        def train_batches(start_step):
            return pipeline.train_dataset(
                source, augmentation, batch, one_hot=setup.one_hot, seed=config.seed, start=start_step * batch,
                shuffle_buffer=config.shuffle_buffer, shard=plan.shard, part=plan.part,
                deterministic=config.deterministic, on_corrupt=config.on_corrupt, on_step=setup.on_step,
                preprocessing=preprocessing_name(setup.model),
            )

        return val_ds, train_batches

    def metadata(self, config, source):
        """`{file name: JSON payload}` written into the run folder besides `config.json`."""
        return {}

    def finish(self, run):
        """The result of the finished `Run` (save what the task leaves with `run.save`)."""
        raise NotImplementedError


@dataclasses.dataclass
class Run:
    """A finished run, as `Task.finish` sees it."""

    config: TrainConfig
    plan: Any  # distribution.Plan
    precision: str
    setup: Setup
    state: checkpointing.RunState
    val_ds: Any
    history: dict
    resumed_from: int
    started: float

    @property
    def seconds(self):
        return time.time() - self.started

    def save(self, model, name):
        """Saves `model` as `name` in the run folder (the chief writes, every process waits); returns the path."""
        path = os.path.join(self.config.run_dir, name)
        plan = self.plan
        with plan.saving(self.setup.train_model), checkpointing.save_target(path, plan.is_chief, plan.collective_save) as tmp:
            if tmp:
                checkpointing.check_room(model, tmp)
                with one_line_errors(path):
                    model.save(tmp)
        plan.gather([0])  # a barrier: every process sees the chief's file complete
        return path

    def evaluate(self):
        """The training model's metrics on the validation data, e.g. `{"loss": ...}`."""
        return self.setup.train_model.evaluate(self.val_ds, verbose=0, return_dict=True)


# The builder options a checkpoint holds that the model must share to load it, which a run takes
# from its weights: CLIP's (and EVA-CLIP's) image tower and a zero-shot head's unit-length features.
WEIGHTS_OWN = ("pre_norm", "patch_bias", "projection_dim", "unit_features", "attention_norm", "projection_bias")


def _weights_and_own(config):
    """`(weights, options)`: `config.weights` read once as a `Checkpoint`, and its `WEIGHTS_OWN`."""
    if config.weights is None:
        return None, {}
    from keras_vit.config.vit_config import ViTConfig
    from keras_vit.weights.reading import weights_checkpoint

    ckpt = weights_checkpoint(config.weights, ViTConfig(**config.architecture()))
    own = ckpt.architecture()
    return ckpt, {name: own[name] for name in WEIGHTS_OWN}


def build_vit(config, own_scaling=False, **head):
    """The ViT `config` describes (architecture, input size, regularisation, weights, remat),
    with the builder arguments of its `head` (`include_top`, `pooling`, `classes`, ...): a named
    model's builder (its family's options), or `VisionTransformer` for model 'custom'.
    `own_scaling`: the run's pipelines scale images by the model's preprocessing (`config.preprocessing`,
    None: the weights' own, e.g. CLIP's mean / std); else by [-1, 1] ("vit", `check_scaling`)."""
    size = config.image_size
    options = config.model_options()
    if not own_scaling:
        options["preprocessing"] = DEFAULT_PREPROCESSING
    weights, own = _weights_and_own(config)
    if not head.get("include_top", True):
        own.pop("unit_features", None)
    builder = VisionTransformer if config.model == "custom" else getattr(applications, config.model)
    return builder(
        **config.architecture(),
        **own,
        weights=weights,
        input_shape=(size, size, 3),
        dropout_rate=config.dropout,
        attention_dropout_rate=config.attention_dropout,
        drop_path_rate=config.drop_path,
        seed=config.seed,
        remat=config.remat,
        name=f"vit_{config.recipe}",
        **({"naflex": True} if config.naflex_seq_lens else {}),
        **options,
        **head,
    )


def check_scaling(task, config):
    """Raises ValueError (one line) for a `config.preprocessing` other than [-1, 1] in a run whose
    pipelines scale to [-1, 1] (`Task.own_scaling` False: pre-training, dense prediction)."""
    if not task.own_scaling and config.preprocessing not in (None, DEFAULT_PREPROCESSING):
        raise ValueError(f"preprocessing={config.preprocessing!r}: keras-vit {task.command} scales its images to "
                         f"[-1, 1] (preprocessing='{DEFAULT_PREPROCESSING}'); a checkpoint's own mean / std is taken "
                         "by keras-vit train.")


def resolve_config(task, config, overrides):
    """The `TrainConfig` of `config` (a recipe name, None: the task's default) with `overrides`;
    raises ValueError for a recipe of another task."""
    if config is None or isinstance(config, str):
        config = recipe(config or task.default_recipe)
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig or a recipe name, got {type(config).__name__}.")
    check_recipe_command(config.recipe, task.command)
    return config.replace(**overrides)


def check_monitor(task, config):
    """Raises ValueError unless `config.monitor` is a metric the run logs (else no epoch would
    ever be the best): the task's, on the training or the validation data, or a few-shot
    accuracy (`fewshot_Kshot`) when `fewshot_every` is set."""
    names = task.logged(config)
    names = [*names, *(f"val_{name}" for name in names)]
    if config.monitor in names or (config.fewshot_every and re.fullmatch(r"fewshot_\d+shot", config.monitor)):
        return
    fewshot = ", or fewshot_Kshot (K training images per class) with fewshot_every" if config.fewshot_every else ""
    raise ValueError(f"monitor={config.monitor!r} is not a metric this run logs; expected one of {', '.join(names)}{fewshot}.")


def run(task, config=None, *, data=None, callbacks=(), resume=True, overwrite_output_dir=False, **overrides):
    """Runs `task` with `config` (a `TrainConfig` or a recipe name) and `overrides`; returns
    what `task.finish` makes of it. `data`, `callbacks`, `resume` and `overwrite_output_dir`
    as for `train`."""
    config = resolve_config(task, config, overrides)
    if config.output_dir is None and data is not None and not isinstance(data, (str, os.PathLike)):
        # arrays given in Python: not the recipe's data, so not the run folder `keras-vit train` resumes
        config = config.replace(output_dir=os.path.join("runs", f"{config.recipe}-arrays"))
    check_monitor(task, config)
    check_scaling(task, config)
    if config.teacher is not None and task.command != "train":
        raise ValueError(f"teacher distils a classifier (keras-vit train); keras-vit {task.command} takes none.")
    run_folder.check_owned(config.run_dir, overwrite_output_dir)
    started = time.time()
    plan = distribution.plan(config.strategy, config.model_parallel_size, config.host_timeout)
    # the chief writes the run folder: it holds the folder's lock for the run
    with run_folder.locked(config.run_dir) if plan.is_chief else contextlib.nullcontext():
        previous_policy = keras.config.dtype_policy()
        seed_everything(config)
        if keras.backend.backend() == "torch":
            torch_cpu_threads()
        policy = precision.apply_precision(config.precision)
        try:
            with plan.scope():
                return _run(task, config, plan, policy, data, callbacks, resume, started)
        finally:
            keras.config.set_dtype_policy(previous_policy)


def _run(task, config, plan, policy, data, extra_callbacks, resume, started):
    if config.naflex_seq_lens and (task.command != "train" or plan.part[0] > 1 or plan.pad_multiple > 1):
        raise ValueError("naflex_seq_lens trains a NaFlex classifier (keras-vit train) in one process on one "
                         "device, without data parallelism; unset naflex_seq_lens or use strategy=none.")
    source, batch, steps_per_epoch, _, total = load_and_plan(task, config, plan, data)
    augmentation = make_augmentation(config)
    setup = task.setup(config, source, augmentation)
    if config.preprocessing is None:  # recorded (config.json) as the model scales its images
        config = config.replace(preprocessing=preprocessing_name(setup.model))
    lora.apply_config(config, setup.model)  # LoRA or the linear probe: what stays trainable
    train_model = setup.train_model
    decayed = setup.model if setup.backbone is None else setup.backbone  # whose blocks layer_decay scales
    train_model.compile(
        optimizer=make_optimizer(config, total, decayed), jit_compile=config.jit_compile, **setup.compile,
    )
    train_model.optimizer.build(train_model.trainable_variables)
    state = checkpointing.RunState(
        config.run_dir,
        setup.model,
        every_steps=config.checkpoint_every,
        monitor=config.monitor,
        fingerprint=fingerprint(task, config, source.name, plan.part[0] if augmentation.mixes_labels else None),
        write=plan.is_chief,
        saving=plan.saving,
        collective_save=plan.collective_save,
    )
    state.tidy()  # what a run killed while saving left behind
    if resume:
        run_agreement.check_same_state(plan, config.run_dir)
    start = state.restore(train_model, total) if resume else 0
    if plan.is_chief:
        _write_run_folder(task, config, source, data, fresh=start == 0)
    plan.prepare(train_model)

    transform = setup.transform or (lambda dataset, salt, start_step: dataset)
    if config.naflex_seq_lens:
        val_ds, train_stream = naflex_streams(config, plan, source, augmentation, batch, setup)
    else:
        val_batches, train_batches = task.batches(config, plan, source, augmentation, batch, setup)
        val_ds = transform(val_batches, 1, 0)

        def train_stream(start_step):
            return plan.feed(transform(train_batches(start_step), 0, start_step))

    callbacks = fewshot_callback.config_callbacks(config, source, setup.model, config.run_dir if plan.is_chief else None)
    callbacks += make_callbacks(config, plan, state, extra_callbacks)
    if start and plan.is_chief:
        print(f"Resuming {config.run_dir} at step {start}/{total} "
              f"(epoch {start // steps_per_epoch + 1}).")
    with hosts.watching(config.run_dir, plan, config.host_timeout, state) as watch:
        history = fit(train_model, train_stream, val_ds, state, steps_per_epoch, total, [*callbacks, watch],
                      fit_verbosity(config.verbose) if plan.is_chief else 0)
    ema.use_average(train_model)  # the weights saved and returned from here on: the average, if kept
    if config.lora_rank and plan.is_chief:
        lora.save(setup.model, run_folder.path(config.run_dir, run_folder.LORA))
    return task.finish(Run(config, plan, policy, setup, state, val_ds, history, start, started))


def fingerprint_fields(task):
    """The `TrainConfig` fields a resumed run of `task` must share: `FINGERPRINT`, every field
    of the model group but `RESUMABLE` (the architecture, each builder option, the NaFlex
    budgets, LoRA: a new one is in by construction), and the task's `resume_fields`."""
    model = [f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("group") == MODEL_GROUP]
    return (*FINGERPRINT, *(name for name in model if name not in RESUMABLE), *task.resume_fields)


def fingerprint(task, config, data, mix_processes=None):
    """What a resumed run of `task` with `config` on the data named `data` must share
    (`fingerprint_fields`), as it reads back from `state.json`; with MixUp / CutMix the number
    of processes `mix_processes` (each draws the mix of its own part of a batch)."""
    found = {key: getattr(config, key) for key in fingerprint_fields(task)}
    found["data"] = data
    if mix_processes is not None:
        found["mixup_cutmix_processes"] = mix_processes
    return json.loads(json.dumps(found))


def naflex_streams(config, plan, source, augmentation, batch, setup):
    """The validation batches and the training stream of a NaFlex run (`keras_vit.data.naflex`),
    packed with `naflex_pack`."""
    patch = setup.model.get_layer("embedding").patch_size
    seq_lens = config.naflex_seq_lens
    pack = naflex_pipeline.packed if config.naflex_pack else (lambda batches: batches)
    val_ds = pack(naflex_pipeline.eval_dataset(source, batch, patch, max(seq_lens), one_hot=setup.one_hot,
                                               on_corrupt=config.on_corrupt, preprocessing=preprocessing_name(setup.model)))

    def train_stream(start_step):
        return plan.feed(pack(naflex_pipeline.train_dataset(
            source, augmentation, batch, patch, seq_lens=seq_lens, one_hot=setup.one_hot, seed=config.seed,
            start_batch=start_step, shuffle_buffer=config.shuffle_buffer, shard=plan.shard,
            deterministic=config.deterministic, on_corrupt=config.on_corrupt, preprocessing=preprocessing_name(setup.model),
        )))

    return val_ds, train_stream


def seed_everything(config):
    keras.utils.set_random_seed(config.seed)
    if not config.deterministic:
        return
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    if keras.backend.backend() == "torch":
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)


def torch_cpu_threads():
    """On CPU, PyTorch's OpenMP threads busy-wait for each other; when the tf.data pipeline
    takes a core from them every op stalls (10-30x slower steps). Leave it one core unless
    OMP_NUM_THREADS says otherwise."""
    import torch

    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) - 1)))


def schedule_steps(config, examples):
    """`(steps_per_epoch, epochs, total)` in fit steps (micro-batches), whole optimizer steps each:
    `epochs` passes over the data, or `steps` optimizer steps exactly (`total`), in epochs of about
    the data's size, the last one shorter where they do not divide."""
    acc = config.accumulation_steps
    per_epoch = max(acc, (examples // config.micro_batch_size) // acc * acc)
    if config.steps is None:
        return per_epoch, config.epochs, per_epoch * config.epochs
    total = config.steps * acc
    per_epoch = math.ceil(total / max(1, round(total / per_epoch)) / acc) * acc
    return per_epoch, math.ceil(total / per_epoch), total


def load_and_plan(task, config, plan, data):
    """`(source, per-process batch, steps per epoch, epochs, total steps)` of a run: the data
    source of the recipe (or `data`, `task.load_source`) and the steps every process takes."""
    source = task.load_source(config, data)
    batch = plan.per_process_batch(config.micro_batch_size)
    shards = plan.shard[0]  # every process plans with the smallest shard: the same steps everywhere
    examples = pipeline.shard_size(source.train_size, shards, shards - 1) * shards
    return (source, batch, *schedule_steps(config, examples))


def make_augmentation(config):
    return pipeline.Augmentation(
        config.image_size,
        crop_area=config.crop_area,
        crop_aspect=config.crop_aspect,
        flip=config.flip,
        randaugment_ops=config.randaugment_ops,
        randaugment_factor=config.randaugment_factor,
        mixup=config.mixup,
        cutmix=config.cutmix,
        crop=config.crop,
        three_augment=config.three_augment,
        color_jitter=config.color_jitter,
        random_erasing=config.random_erasing,
        repeated_augment=config.repeated_augment,
    )


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
        ema_decay=config.ema_decay,
    )


def _write_run_folder(task, config, source, data, fresh):
    """Writes the run's metadata; a run starting from step 0 first clears what an earlier run
    left (`run_folder.clear`)."""
    os.makedirs(config.run_dir, exist_ok=True)
    if fresh:
        run_folder.clear(config.run_dir)
    recorded = config.to_dict()
    if data is not None:  # given to the function directly: a name or path is reloadable, arrays are not
        recorded["data"] = os.fspath(data) if isinstance(data, (str, os.PathLike)) else None
    files = {run_folder.CONFIG: recorded, **task.metadata(config, source)}
    for name, payload in files.items():
        write_json(run_folder.path(config.run_dir, name), payload)


def make_callbacks(config, plan, state, extra):
    """The run's callbacks: the NaN guard and the run state first (validation on the weight
    average if kept), the chief's logs, then `extra`."""
    advice = (
        f"lower the learning rate (now {config.learning_rate}), keep clipnorm on, or use "
        f"precision='float32' (now {config.precision!r})"
    )
    callbacks = [checkpointing.StopOnNaN(state, advice=advice), state]
    if config.ema_decay:
        callbacks.append(ema.EvaluateAverage())
    if plan.is_chief:
        callbacks.append(RunLog(run_folder.path(config.run_dir, run_folder.LOG)))
        if config.writes_tensorboard:
            callbacks.append(keras.callbacks.TensorBoard(run_folder.path(config.run_dir, run_folder.TENSORBOARD)))
        elif config.tensorboard:
            warnings.warn("TensorBoard logs skipped: the `tensorboard` package is not installed.", stacklevel=3)
    return callbacks + list(extra)


class RunLog(keras.callbacks.CSVLogger):
    """Keras' `CSVLogger` appending to `path`, each epoch's row added by writing the whole file
    under a temporary name and renaming it: a kill never leaves half a row."""

    def __init__(self, path):
        super().__init__(path, append=True)

    def on_train_begin(self, logs=None):
        text = ""
        if os.path.lexists(self.filename):
            with open(regular_file(self.filename, "as the run's log"), encoding="utf-8", newline="") as handle:
                text = handle.read()
        self.append_header = not text.partition("\n")[0]
        self.csv_file, self.writer, self.keys = io.StringIO(text), None, None
        self.csv_file.seek(0, io.SEEK_END)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        write_text(self.filename, self.csv_file.getvalue())


def fit_verbosity(verbose):
    """`fit`'s `verbose`: "auto" is Keras' progress bar on a terminal or in a notebook, and one
    line per epoch (2) where stdout is a file or a pipe (CI, nohup), where a bar is redrawn."""
    if verbose != "auto":
        return verbose
    return 1 if sys.stdout.isatty() or "ipykernel" in sys.modules else 2


def fit(train_model, train_stream, val_ds, state, steps_per_epoch, total, callbacks, verbose):
    """`fit` from `state.step` to step `total`: the whole epochs in one call; a run resumed
    mid-epoch first finishes that epoch, and a last epoch shorter than the others runs alone."""
    history, done = {}, state.step
    while done < total:
        epoch, within = divmod(done, steps_per_epoch)
        left = min(steps_per_epoch, total - epoch * steps_per_epoch) - within  # of this epoch
        whole = not within and left == steps_per_epoch
        fitted = train_model.fit(
            train_stream(done), epochs=total // steps_per_epoch if whole else epoch + 1, initial_epoch=epoch,
            steps_per_epoch=left, validation_data=val_ds, callbacks=callbacks, verbose=verbose, shuffle=False,
        )
        for key, values in fitted.history.items():
            history.setdefault(key, []).extend(float(v) for v in values)
        if state.step == done or train_model.stop_training:  # a callback stopped the run
            break
        done = state.step
    return history
