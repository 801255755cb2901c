"""Distillation from a frozen teacher, inside the training step.

The training model (`DistillingModel`) is one functional graph: the student, and the teacher on
the same augmented batch, resized and scaled as the teacher's own preprocessing wants
(`TeacherInput`), frozen and called in inference mode. Its output is one float32 tensor, the
columns side by side: the student's class logits, what it distils (its logits, its distillation
head's, or its projected pooled feature) and the teacher's logits or pooled feature. The loss of
a batch (`compute_loss`) is

    (1 - alpha) * label loss + alpha * distillation loss,

each example's distillation loss being

    soft:     T^2 * KL(softmax(teacher / T) || softmax(student / T))     (timm's logit distillation)
    hard:     cross-entropy of the student against the teacher's class    (DeiT's hard distillation)
    feature:  mean squared error, or 1 - cosine similarity, of the projected student feature and
              the teacher's pooled feature                                 (timm's feature distillation)

A student with DeiT's distillation token (`distillation_token=True`) trains its class head on the
labels and its distillation head on the teacher; its metrics, validation loss and every saved
model read the mean of both heads, as DeiT and timm predict. The teacher's outputs exist only
within the step; `label_loss` and `distill_loss` are logged next to `loss`. Under
`tf.distribute` each replica's loss is its own mean divided by the number of replicas (Keras'
convention, whose losses divide so and whose loss tracker multiplies back; the replicas'
gradients are summed): `compute_loss` mixes the replica's own means and divides the mix once.
"""

import os

import keras
from keras import ops
from keras.src.losses.loss import scale_loss_for_distribution, unscale_loss_for_distribution

from keras_vit import run_folder
from keras_vit.model.logits import ends_with_softmax
from keras_vit.preprocessing import DEFAULT, name_of, preprocessing
from keras_vit.training import on_step


def load_teacher(source):
    """The teacher model of `source`: a run folder (its `best.keras`, else `final.keras`), a
    `.keras` file, or what `keras_vit.from_checkpoint` reads or names; refused in one line
    (FileNotFoundError, ValueError) when there is nothing there or it is not a model. Its
    variables' paths start with `teacher/`: a student's are never the same (PyTorch's module
    keeps one parameter per path; a student parameter shadowed by the teacher's would keep its
    gradient from step to step)."""
    model = _load(os.fspath(source))
    with keras.name_scope("teacher"):  # (after loading: checkpoint readers match the variables by path)
        teacher = keras.models.clone_model(model)
    teacher.set_weights(model.get_weights())
    teacher.preprocessing = getattr(model, "preprocessing", None)
    return teacher


def _load(source):
    if os.path.isdir(source) and os.path.lexists(run_folder.path(source, run_folder.CONFIG)):
        saved = [run_folder.path(source, name) for name in (run_folder.BEST, run_folder.FINAL)]
        found = [path for path in saved if os.path.isfile(path)]
        if not found:
            raise ValueError(f"teacher={source!r} is a run folder without a trained model ({' or '.join(saved)}); "
                             "give a finished run, a .keras file or a checkpoint.")
        return run_folder.load_keras_file(found[0])
    if source.endswith(".keras"):
        if not os.path.lexists(source):
            raise FileNotFoundError(f"teacher={source!r}: no such file; give a run folder, a .keras file or a checkpoint.")
        return run_folder.load_keras_file(source)
    from keras_vit.applications.from_checkpoint import from_checkpoint

    looks_like_path = os.sep in source or os.path.splitext(source)[1] != ""
    if looks_like_path and not os.path.lexists(source):
        raise FileNotFoundError(f"teacher={source!r}: no such file or folder; give a run folder, a .keras file or a "
                                "checkpoint path or name.")
    try:
        return from_checkpoint(source)
    except (ValueError, KeyError, OSError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise ValueError(f"teacher={source!r} is not a model keras_vit reads ({reason}).") from None


class TeacherInput(keras.layers.Layer):
    """The student's images (scaled by its preprocessing, `student`) as the teacher wants them: back
    to 0-255, resized to `size` with the teacher's interpolation, then `(pixels - offset) / scale`
    of the teacher's preprocessing (`spec`)."""

    def __init__(self, size, spec, student, **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self.size, self.spec, self.student = tuple(size), spec, student

    def call(self, images):
        back = [ops.convert_to_tensor(v, "float32") for v in (self.student.scale, self.student.offset)]
        pixels = ops.cast(images, "float32") * back[0] + back[1]
        if tuple(images.shape[1:3]) != self.size:
            pixels = ops.image.resize(pixels, self.size, interpolation=self.spec.interpolation)
        offset, scale = (ops.convert_to_tensor(v, "float32") for v in (self.spec.offset, self.spec.scale))
        return (pixels - offset) / scale

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self.size, input_shape[-1])


def pooled_feature(model, who):
    """`model`'s pooled feature (what its head reads; a headless model's 2-D output), or ValueError."""
    names = [layer.name for layer in model.layers]
    if "head" in names:
        return model.get_layer("head").input
    if len(model.outputs[0].shape) == 2 and not ends_with_softmax(model):
        return model.outputs[0]
    raise ValueError(f"distill=feature needs the {who}'s pooled feature (what a classification head reads); "
                     f"{model.name} has no head layer and outputs {tuple(model.outputs[0].shape)}.")


def teacher_logits(model):
    """`model`'s logits: its output before a final softmax, else its output."""
    return model.layers[-1].input if ends_with_softmax(model) else model.outputs[0]


def _float32(tensor, name):
    return keras.layers.Activation("linear", dtype="float32", name=name)(tensor)


def _in_run_precision(teacher):
    """Sets every layer of `teacher` to the run's mixed precision (variables stay float32)."""
    policy = keras.config.dtype_policy()
    if policy.compute_dtype == policy.variable_dtype:
        return
    for layer in teacher._flatten_layers(include_self=False):  # noqa: SLF001  (Keras' own walk of nested layers)
        if layer.dtype_policy.name == "float32":
            layer.dtype_policy = policy


def distilling_model(student, teacher, config, num_classes):
    """The `DistillingModel` training `student` (a classifier) against the frozen `teacher` as
    `config` says; one-line ValueError where they do not fit."""
    if isinstance(teacher.input, dict) or len(teacher.inputs) != 1:
        raise ValueError(f"The teacher {teacher.name} takes {len(teacher.inputs)} inputs; a teacher takes images.")
    mode, names = config.distill, [layer.name for layer in student.layers]
    token = "head_dist" in names
    if token and mode == "feature":
        raise ValueError("distill=feature trains the student's pooled feature; a student with distillation_token "
                         "trains its distillation head on the teacher's logits: use distill=soft or hard.")
    if mode == "feature":
        target = pooled_feature(teacher, "teacher")
    else:
        target = teacher_logits(teacher)
        if target.shape[-1] != num_classes:
            raise ValueError(f"The teacher predicts {target.shape[-1]} classes and the student {num_classes}: "
                             f"distill={mode} compares class by class; give a teacher of the same classes (or "
                             "distill=feature).")
    frozen = keras.Model(teacher.inputs, target, name="teacher")
    frozen.trainable = False
    _in_run_precision(frozen)
    size = tuple(d or s for d, s in zip(teacher.inputs[0].shape[1:3], student.inputs[0].shape[1:3]))
    spec = preprocessing(getattr(teacher, "preprocessing", None) or DEFAULT)
    images = student.inputs[0]
    scaling = preprocessing(name_of(student))
    taught = _float32(frozen(TeacherInput(size, spec, scaling, name="teacher_input")(images), training=False),
                      "teacher_out")
    if token:
        logits = _float32(student.get_layer("head").output, "class_logits")
        learner = _float32(student.get_layer("head_dist").output, "dist_logits")
    else:
        logits = _float32(student.layers[-1].input if ends_with_softmax(student) else student.outputs[0], "class_logits")
        learner = logits
        if mode == "feature":
            feature = pooled_feature(student, "student")
            learner = _float32(keras.layers.Dense(target.shape[-1], name="distill_projection")(feature), "projected")
    outputs = keras.layers.Concatenate(name="distilling", dtype="float32")([logits, learner, taught])
    model = DistillingModel(student.inputs, outputs, name=f"{student.name}_distilling")
    model.setup(config, num_classes, learner.shape[-1], token)
    model.scaling = scaling  # the step scales the host's batch as the student's own training does
    return model


def distill_losses(mode, student, teacher, temperature=1.0, feature_loss="mse"):
    """Each example's distillation loss of `student` against `teacher` (see the module docstring)."""
    if mode == "soft":
        log_student = ops.log_softmax(student / temperature, axis=-1)
        log_teacher = ops.log_softmax(teacher / temperature, axis=-1)
        return temperature**2 * ops.sum(ops.exp(log_teacher) * (log_teacher - log_student), axis=-1)
    if mode == "hard":
        target = ops.one_hot(ops.argmax(teacher, axis=-1), teacher.shape[-1])
        return -ops.sum(target * ops.log_softmax(student, axis=-1), axis=-1)
    if feature_loss == "mse":
        return ops.mean(ops.square(student - teacher), axis=-1)
    unit_student, unit_teacher = (v / ops.maximum(ops.norm(v, axis=-1, keepdims=True), 1e-12) for v in (student, teacher))
    return 1.0 - ops.sum(unit_student * unit_teacher, axis=-1)


def _weighted_mean(values, sample_weight):
    if sample_weight is None:
        return ops.mean(values)
    weight = ops.cast(ops.reshape(sample_weight, (-1,)), values.dtype)
    return ops.sum(values * weight) / ops.maximum(ops.sum(weight), 1e-12)


class DistillingModel(on_step.TrainingModel):
    """The training model of a distillation run (`distilling_model`; see the module docstring)."""

    def setup(self, config, num_classes, width, token):
        self.mode, self.num_classes, self.width, self.token = config.distill, num_classes, width, token
        self.temperature, self.alpha = config.distill_temperature, config.distill_alpha
        self.feature_loss = config.distill_feature_loss
        self.label_tracker = keras.metrics.Mean(name="label_loss")
        self.distill_tracker = keras.metrics.Mean(name="distill_loss")

    def split(self, y_pred):
        """`(class logits, student's distilled output, teacher's output)` of the model's output."""
        c, w = self.num_classes, self.width
        return y_pred[:, :c], y_pred[:, c:c + w], ops.stop_gradient(y_pred[:, c + w:])

    def predicted(self, y_pred):
        """The logits the saved model predicts: the class head's, or the mean of both heads."""
        logits, learner, _ = self.split(y_pred)
        return (logits + learner) / 2 if self.token else logits

    def compile(self, loss=None, **kwargs):
        """Keras' compile; `loss` is the label loss of `compute_loss`."""
        self.label_loss = loss
        super().compile(**kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits, learner, taught = self.split(y_pred)
        # Keras' loss is this replica's mean already divided by the replicas of a tf.distribute strategy
        label = unscale_loss_for_distribution(self.label_loss(y, logits if training else self.predicted(y_pred),
                                                              sample_weight))
        distill = _weighted_mean(distill_losses(self.mode, learner, taught, self.temperature, self.feature_loss),
                                 sample_weight)
        batch = ops.shape(y_pred)[0]
        self.label_tracker.update_state(label, sample_weight=batch)
        self.distill_tracker.update_state(distill, sample_weight=batch)
        total = (1.0 - self.alpha) * label + self.alpha * distill
        for extra in self.losses:
            total = total + ops.sum(extra)
        return scale_loss_for_distribution(total)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, self.predicted(y_pred), sample_weight)
