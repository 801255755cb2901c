"""`train()`: a recipe, data and a ViT -> `model.fit` with checkpoints, logs and resumption.

The task is supervised classification: the model (the config's ViT with a softmax head, or one
given), cross-entropy with top-1 / top-5, `classes.json` in the run folder, and at the end
`final.keras` and the best model's validation metrics. The rest is the run engine's.
"""

import dataclasses

import keras

from keras_vit import run_folder
from keras_vit.model.packed import packed_model
from keras_vit.utils.torch_compile import compile_once
from keras_vit.training import engine, on_step
from keras_vit.model.logits import logits_output
from keras_vit.preprocessing import name_of, preprocessing


@dataclasses.dataclass(kw_only=True)
class TrainResult(engine.RunResult):
    """What a run produced: the model (best weights), paths, its validation metrics, history."""

    top1: float
    top5: float
    val_loss: float


def is_naflex(model):
    """Whether `model` takes NaFlex inputs (`{"patches", "spatial_shapes", "mask"}`)."""
    return isinstance(model.input, dict) and "spatial_shapes" in model.input


def build_model(config, num_classes):
    """The ViT of `config` with a `num_classes` head (softmax output), pretrained if `weights`."""
    return engine.build_vit(
        config, own_scaling=True, include_top=True, pooling=config.head_pooling, classes=num_classes,
        classifier_activation="softmax",
        representation_size=config.representation_size,
    )


def loss_and_metrics(num_classes, one_hot, from_logits, label_smoothing, loss="ce"):
    """The loss ("ce", or "bce" on one-hot targets) and the accuracy metrics."""
    k = min(5, num_classes)
    if one_hot:
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy"), keras.metrics.TopKCategoricalAccuracy(k, name="top5")]
    else:
        metrics = [
            keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            keras.metrics.SparseTopKCategoricalAccuracy(k, name="top5"),
        ]
    if loss == "bce":
        return keras.losses.BinaryCrossentropy(from_logits=from_logits, reduction="mean_with_sample_weight"), metrics
    if one_hot:
        return keras.losses.CategoricalCrossentropy(from_logits=from_logits, label_smoothing=label_smoothing,
                                                    reduction="mean_with_sample_weight"), metrics
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits, reduction="mean_with_sample_weight"), metrics


class Classification(engine.Task):
    """Supervised classification of the data's classes, by `model` or the config's ViT (with a
    teacher: distilled from it, `keras_vit.training.distill`)."""

    resume_fields = ("teacher", "distill", "distill_temperature", "distill_alpha", "distill_feature_loss")

    own_scaling = True

    def __init__(self, model=None):
        self.model = model

    def setup(self, config, source, augmentation):
        model = self.model
        if model is None:
            model = build_model(config, source.num_classes)
        elif bool(config.naflex_seq_lens) != is_naflex(model):
            raise ValueError("naflex_seq_lens needs a NaFlex model (naflex=True) and a NaFlex model needs "
                             "naflex_seq_lens; the model and the option disagree.")
        elif not is_naflex(model) and tuple(model.inputs[0].shape[1:3]) not in ((config.image_size,) * 2, (None, None)):
            raise ValueError(
                f"The model takes {tuple(model.inputs[0].shape[1:])} images but image_size={config.image_size}."
            )
        one_hot = config.label_smoothing > 0 or augmentation.mixes_labels or config.loss == "bce"
        logits, from_logits = logits_output(model)
        loss, metrics = loss_and_metrics(source.num_classes, one_hot, from_logits, config.label_smoothing, config.loss)
        compiled = dict(loss=loss, weighted_metrics=metrics)
        if config.teacher is not None:
            from keras_vit.training import distill

            teacher = distill.load_teacher(config.teacher)
            train_model = compile_once(distill.distilling_model(model, teacher, config, source.num_classes))
            return engine.Setup(model, train_model, compiled, one_hot=one_hot, on_step=True)
        if is_naflex(model):  # the host makes the finished NaFlex batches (`keras_vit.data.naflex`)
            train_model = (packed_model(model, logits=True) if config.naflex_pack
                           else keras.Model(model.input, logits, name=f"{model.name}_logits"))
            train_model = compile_once(train_model)
            return engine.Setup(model, train_model, compiled, one_hot=one_hot)
        # the same layers, with a step that scales and mixes the host's uint8 batches
        train_model = on_step.TrainingModel(model.inputs, logits, name=f"{model.name}_logits")
        train_model.scaling = preprocessing(name_of(model))
        train_model = compile_once(train_model)
        # weighted: the padding of evaluation batches (weight 0) is not counted
        return engine.Setup(model, train_model, compiled, one_hot=one_hot, on_step=True)

    def logged(self, config):
        distilled = ("label_loss", "distill_loss") if config.teacher is not None else ()
        return ("loss", *distilled, "accuracy", "top5")

    def metadata(self, config, source):
        classes = {"class_names": source.class_names, "image_size": config.image_size, "eval_crop": config.eval_crop}
        return {run_folder.CLASSES: classes}

    def finish(self, run):
        model, state = run.setup.model, run.state
        final_path = run.save(model, run_folder.FINAL)
        has_best = state.best is not None  # the same on every process (load_weights is a collective on a mesh)
        if has_best:
            model.load_weights(state.best_path)
        results = run.evaluate()
        return TrainResult(
            model=model,
            run_dir=run.config.run_dir,
            best_path=state.best_path if has_best else final_path,
            final_path=final_path,
            top1=float(results["accuracy"]),
            top5=float(results["top5"]),
            val_loss=float(results.get("label_loss", results["loss"])),  # distilled: the model's own loss
            best_epoch=state.best_epoch or 0,
            history=run.history,
            steps=state.step,
            resumed_from=run.resumed_from,
            seconds=run.seconds,
            precision=run.precision,
            strategy=run.plan.name,
            is_chief=run.plan.is_chief,
        )


def train(config=None, *, model=None, data=None, callbacks=(), resume=True, overwrite_output_dir=False, **overrides):
    """Trains a ViT; returns a `TrainResult` (`task="segmentation" | "depth"`: a dense head on the
    ViT, `keras_vit.training.dense`, returning a `DenseResult`). Rerun with the same settings to resume.

    Args:
        config: a `TrainConfig` or a recipe name ("digits" by default, "finetune", "scratch").
        model: optionally a ready `keras.Model` (images in, class probabilities or logits out;
            dense tasks: a `keras_vit.DenseModel`) instead of the one the config describes.
        data: optionally data instead of `config.data`: NumPy `(x, y)` or
            `((x_train, y_train), (x_val, y_val))` (run folder by default `runs/RECIPE-arrays`,
            not the command line's `runs/RECIPE`), a folder, a tfds name or "digits" (dense tasks:
            a folder of `images/` with `masks/` or `depth/`).
        callbacks: more Keras callbacks.
        resume: continue from the checkpoint in the run directory if there is one (False:
            start anew, removing what an earlier run wrote there).
        overwrite_output_dir: write into a run directory that holds files but no run
            (refused otherwise); files of a run's names there are replaced.
        **overrides: any `TrainConfig` field.
    """
    config = engine.resolve_config(Classification(), config, overrides)
    if config.task == "classification":
        task = Classification(model)
    else:
        from keras_vit.training.dense import DenseTraining

        task = DenseTraining.checked(config, model, data)  # bad data refused before the run folder is made
    return engine.run(task, config, data=data, callbacks=callbacks, resume=resume,
                      overwrite_output_dir=overwrite_output_dir)
