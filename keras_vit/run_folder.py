"""The run folder of `train` / `pretrain`, as a contract: the names of its files, who may write
into it, and loading a model from it (or by name) with its preprocessing and classes.

    RUN/config.json          the run's `TrainConfig` (`data` as given)
    RUN/classes.json         `train`: class names, image size, evaluation crop
    RUN/log.csv              one row of metrics per epoch
    RUN/fewshot.csv          one row per few-shot evaluation (`fewshot_every`)
    RUN/best.keras           the model of the best epoch by `monitor`
    RUN/final.keras          `train`: the model after the last step
    RUN/encoder.keras        `pretrain`: the encoder after the last step
    RUN/lora.npz             `lora_rank`: the LoRA matrices and the head
    RUN/checkpoint/          `state.json` and the `step-N.weights.h5` it names: the state to resume from
    RUN/tensorboard/         TensorBoard logs
    RUN/hosts/               multi-host runs: each host's heartbeat
    RUN/run.lock             while a run is going: its process id and host

A folder is a run's when it is missing or empty, or holds a run's `config.json` or
`checkpoint/state.json`; a run refuses any other folder unless told to use it
(`overwrite_output_dir`), and a second run while one holds the lock. The lock and the
heartbeats carry keras_vit's mark (`signed`): a `run.lock` or `hosts` entry without it is a
user's, never removed nor taken for a run's. Every file is written under a temporary name and
renamed (`keras_vit.utils.files`). Plain Python: Keras is imported only to load a model.
"""

import contextlib
import json
import os
import re
import socket

from keras_vit.utils import files
from keras_vit.utils.limits import check_keras_config

CONFIG = "config.json"
CLASSES = "classes.json"
LOG = "log.csv"
FEWSHOT = "fewshot.csv"
BEST = "best.keras"
FINAL = "final.keras"
ENCODER = "encoder.keras"
LORA = "lora.npz"
CHECKPOINT = "checkpoint"
STATE = "state.json"  # in CHECKPOINT
TENSORBOARD = "tensorboard"
HOSTS = "hosts"  # multi-host runs: each host's heartbeat (`training.parallel.hosts`)
LOCK = "run.lock"
# What a run writes at the top of its folder; `clear` removes these (and only these). Not
# HOSTS: the other hosts of a starting run may already beat there.
RUN_FILES = (CONFIG, CLASSES, LOG, FEWSHOT, BEST, FINAL, ENCODER, LORA, CHECKPOINT, TENSORBOARD)
# Keys every `config.json` of a run holds (`TrainConfig` fields since the first release).
CONFIG_KEYS = ("data", "model", "recipe", "output_dir", "batch_size", "image_size")

# The mark of the files keras_vit writes to coordinate a run (the lock, the heartbeats).
MARK = {"written_by": "keras_vit"}
# The names keras_vit writes in HOSTS (`training.parallel.hosts`), done or being written.
HOST_FILE = re.compile(r"(host-\d+|run)\.json(\.\d+\.tmp)?")
MARKED_SIZE = 2**16  # a marked file is small; a larger one is a user's, not read

OVERWRITE_HINT = "pass --overwrite-output-dir (overwrite_output_dir=True) to write the run into it anyway"


class NotARunFolder(FileExistsError):
    """The output folder holds files, but no run of keras_vit."""


class RunInProgress(FileExistsError):
    """Another live process holds the run folder's lock."""


def path(run_dir, name):
    return os.path.join(run_dir, name)


def state_path(run_dir):
    return os.path.join(run_dir, CHECKPOINT, STATE)


def is_run(run_dir):
    """Whether `run_dir` holds a keras_vit run: its `checkpoint/state.json`, or a `config.json`
    with a run's keys."""
    if os.path.lexists(state_path(run_dir)):
        return True
    config = path(run_dir, CONFIG)
    try:
        with open(files.regular_file(config, "as a run's config"), encoding="utf-8") as handle:
            recorded = files.parse_json(handle.read())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and all(key in recorded for key in CONFIG_KEYS)


def signed(payload):
    """`payload` (a dict) with keras_vit's `MARK`, as the lock and the heartbeats are written."""
    return {**payload, **MARK}


def read_marked(file):
    """The JSON dict in `file` if it is a small regular file keras_vit wrote (`MARK`), else None."""
    try:
        if os.path.islink(file) or not os.path.isfile(file) or os.path.getsize(file) > MARKED_SIZE:
            return None
        with open(files.regular_file(file, "as a keras_vit file"), encoding="utf-8") as handle:
            payload = files.parse_json(handle.read())
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) and all(payload.get(k) == v for k, v in MARK.items()) else None


def is_own(run_dir, name):
    """Whether the entry `name` of `run_dir` is what keras_vit leaves while coordinating a run:
    its marked lock, or a `hosts` folder of marked heartbeats (and their temporary files)."""
    entry = path(run_dir, name)
    if name == LOCK:
        return read_marked(entry) is not None
    if name != HOSTS or os.path.islink(entry) or not os.path.isdir(entry):
        return False
    names = os.listdir(entry)
    return all(HOST_FILE.fullmatch(n) and (n.endswith(".tmp") or read_marked(os.path.join(entry, n))) for n in names)


def check_owned(run_dir, overwrite=False):
    """Raises `NotARunFolder` (one line) unless a run may write into `run_dir`: missing,
    empty (but for what keras_vit leaves: its marked lock and heartbeats, temporary files), a
    run's, or `overwrite`."""
    if not os.path.lexists(run_dir):
        return
    if not os.path.isdir(run_dir):
        raise NotADirectoryError(f"--output-dir {run_dir} is a file, not a folder; choose another output directory.")
    others = [name for name in os.listdir(run_dir) if not is_own(run_dir, name) and not name.startswith(files.TMP_PREFIX)]
    if overwrite or not others or is_run(run_dir):
        return
    listed = ", ".join(sorted(others)[:3]) + (", ..." if len(others) > 3 else "")
    raise NotARunFolder(
        f"--output-dir {run_dir} holds files ({listed}) but no keras_vit run; refusing to write into it: choose "
        f"another output directory, or {OVERWRITE_HINT}."
    )


def _owner(lock):
    """`(pid, host)` recorded in a lock keras_vit wrote, or None (missing, or not such a lock)."""
    owner = read_marked(lock)
    try:
        return int(owner["pid"]), str(owner["host"])
    except (KeyError, TypeError, ValueError):
        return None


def _stale(owner):
    """Whether the lock's owner is gone: a dead process of this host. The owner of another
    host cannot be checked: its lock stays until removed."""
    pid, host = owner
    return host == socket.gethostname() and pid != os.getpid() and not files.alive(pid)


@contextlib.contextmanager
def locked(run_dir):
    """Holds `run_dir`'s lock for the block: created exclusively (a link to a complete file),
    holding this process's id and host and keras_vit's mark; a stale lock (its process dead) is
    taken over; a live one raises `RunInProgress`; a `run.lock` without the mark (a user's file
    or folder) is left as it is and refused (`NotARunFolder`). A folder the lock made is removed
    again if the block left it empty (a run refused before it wrote anything)."""
    made = not os.path.lexists(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    lock = path(run_dir, LOCK)
    mine = signed({"pid": os.getpid(), "host": socket.gethostname()})
    tmp = files.temporary_name(lock)
    try:
        files.write_json(tmp, mine)
        for _ in range(3):
            try:
                os.link(tmp, lock)
                break
            except FileExistsError:
                owner = _owner(lock)
                if owner is None and os.path.lexists(lock):
                    raise NotARunFolder(
                        f"{lock} is not a lock keras_vit wrote; refusing to remove or use it: move it away, or "
                        "give another --output-dir."
                    ) from None
                if owner is not None and not _stale(owner):
                    pid, host = owner
                    raise RunInProgress(
                        f"{run_dir} is in use by a run of process {pid} on {host} (its lock {lock}); wait for it "
                        "to end, or give another --output-dir (remove the lock only if that run is gone)."
                    ) from None
                if owner is not None:
                    _take_away(lock, owner)
        else:
            raise RunInProgress(f"Could not take the lock {lock}: other runs keep taking it.")
    finally:
        files.remove(tmp)
    try:
        yield
    finally:
        if _owner(lock) == (mine["pid"], mine["host"]):
            os.remove(lock)
        if made and not os.listdir(run_dir):
            os.rmdir(run_dir)


def _take_away(lock, owner):
    """Removes the stale `lock` of `owner`, unless another run took it over meanwhile."""
    aside = files.temporary_name(lock)
    try:
        os.replace(lock, aside)
    except FileNotFoundError:
        return
    if _owner(aside) != owner:  # a live run's new lock: put it back
        with contextlib.suppress(FileExistsError):
            os.link(aside, lock)
    files.remove(aside)


def clear(run_dir):
    """Removes what an earlier run wrote into `run_dir` (`RUN_FILES`: its models, logs, LoRA
    matrices, few-shot rows, saved states), so that a run starts anew; nothing else."""
    for name in RUN_FILES:
        files.remove(path(run_dir, name))


def metadata(model_path):
    """`{"classes": ..., "config": ...}`: the `classes.json` and `config.json` of the run next
    to `model_path` (those present)."""
    from keras_vit.weights.containers import read_json

    folder = os.path.dirname(os.path.abspath(model_path))
    found = {}
    for name in (CLASSES, CONFIG):
        if os.path.lexists(path(folder, name)):
            found[name.split(".")[0]] = read_json(path(folder, name))
    _check_classes(found.get("classes", {}), path(folder, CLASSES))
    return found


def _check_classes(recorded, where):
    """Raises ValueError (one line naming `where`) unless the `classes.json` values present are
    what `train` writes: class names a list of strings, the image size a whole number >= 1,
    the evaluation crop a number in (0, 1]."""
    from keras_vit.config.fields import check_range

    names, size, crop = (recorded.get(key, ok) for key, ok in (("class_names", []), ("image_size", 1), ("eval_crop", 1)))
    if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
        raise ValueError(f"{where}: class_names={names!r}; expected a list of strings.")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"{where}: image_size={size!r}; expected a whole number >= 1.")
    try:
        check_range("eval_crop", crop, "(0, 1]")
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def load_keras_file(file):
    """`keras.saving.load_model(file)`, with a damaged file (zip CRC, truncation), one that is
    not a regular file, one naming classes that are not registered, or one declaring sizes
    past `keras_vit.utils.limits` refused in one line (ValueError)."""
    import zipfile
    import zlib

    import keras

    from keras_vit import model  # noqa: F401 (registers the layers and the model class for keras.saving.load_model)

    files.regular_file(file, "as a Keras model")
    try:
        if zipfile.is_zipfile(file):  # the sizes it declares, checked before Keras allocates them
            with zipfile.ZipFile(file) as archive:
                check_keras_config(files.parse_json(archive.read("config.json")), file)
        return keras.saving.load_model(file)
    except (zipfile.BadZipFile, zlib.error, EOFError, KeyError, TypeError, json.JSONDecodeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{file}: cannot load it as a Keras model ({reason[:300]}).") from None


def load_model(model="runs/digits/best.keras", weights="imagenet", **builder_args):
    """`(model, class_names, eval_crop)` of `model`: a `.keras` file (the classes and crop its
    run recorded), or a name of `keras_vit.list_models()` built with `weights` and
    `builder_args` (the crop of its preprocessing). ImageNet class names for 1000 classes."""
    from keras_vit.data.imagenet import imagenet_classes
    from keras_vit.preprocessing import preprocessing
    from keras_vit.variants import list_models

    if model in list_models():
        import keras_vit

        loaded = getattr(keras_vit, model)(weights=weights, **builder_args)
        recorded = {"eval_crop": preprocessing(loaded).crop_fraction}
    elif os.path.lexists(model):
        loaded, recorded = load_keras_file(model), metadata(model).get("classes", {})
    elif os.sep in model or model.endswith(".keras"):
        raise FileNotFoundError(f"No model at {model}: give a .keras file (e.g. runs/digits/best.keras) or a model name.")
    else:
        raise ValueError(f"Unknown model {model!r}; expected a .keras file or one of {', '.join(list_models())}.")
    names = recorded.get("class_names")
    several = isinstance(loaded.output, (dict, list, tuple))  # EoMT's two outputs: not a classifier's
    classes = loaded.output_shape[-1] if not several and len(loaded.output_shape) == 2 else None
    if names is not None and classes is not None and len(names) != classes:  # a dense model: per pixel
        raise ValueError(f"{path(os.path.dirname(os.path.abspath(model)), CLASSES)} names {len(names)} classes; "
                         f"the model {model} predicts {classes}.")
    if names is None and classes == 1000:
        names = [name for _, name in imagenet_classes()]
    return loaded, names, recorded.get("eval_crop", 1.0)
