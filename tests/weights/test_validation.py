"""One validation layer for every reader (issue 35 part 3): family tensors of the wrong shape
or dtype, `.keras` configurations declaring huge models and files declaring huge tensors are
refused in one line (exit 2 from the command line), before anything is allocated or written.
File handling is the same on every backend, so these run on one."""

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile

import h5py
import numpy as np
import pytest

from keras_vit.weights import formats, read_checkpoint
from keras_vit.weights.canonical import LAYER_SCALE, MAP, MAP_KEYS, POSEMB
from keras_vit.weights.lazy import LazyArray
from tests.support import BACKEND
from tests.support.checkpoints import TINY, edit_keras_config, original_npz_params
from tests.support.commands import fails

pytestmark = pytest.mark.backend_independent  # file handling: runs under one backend (tests/conftest.py)

GIB = 2**30
D, HEADS, MLP = TINY["hidden_dim"], TINY["num_heads"], TINY["mlp_dim"]


def family_params(family, rng):
    """Canonical tensors of a tiny DeiT (distilled), DINOv2 (registers, LayerScale) or SigLIP
    (MAP head, no class token) checkpoint."""
    params = original_npz_params(rng)
    if family == "deit":
        params["dist"] = rng.standard_normal((1, 1, D)).astype(np.float32)
        params[POSEMB] = rng.standard_normal((1, 2 + 16, D)).astype(np.float32)
        params["head_dist/kernel"], params["head_dist/bias"] = np.zeros((D, 5), np.float32), np.zeros(5, np.float32)
    elif family == "dinov2":  # a backbone, as transformers' Dinov2Model
        del params["head/kernel"], params["head/bias"]
        params["reg"] = rng.standard_normal((1, 4, D)).astype(np.float32)
        for i in range(TINY["depth"]):
            for key in LAYER_SCALE:
                params[key.format(i=i)] = np.full(D, 1e-5, np.float32)
    else:
        del params["cls"], params["head/kernel"], params["head/bias"]
        params[POSEMB] = rng.standard_normal((1, 16, D)).astype(np.float32)
        shapes = {"probe": (1, 1, D), "out/kernel": (HEADS, D // HEADS, D), "out/bias": (D,), "LayerNorm_0": (D,),
                  "Dense_0/kernel": (D, MLP), "Dense_0/bias": (MLP,), "Dense_1/kernel": (MLP, D), "Dense_1/bias": (D,),
                  "kernel": (D, HEADS, D // HEADS), "bias": (HEADS, D // HEADS)}  # the most specific first
        for key in MAP_KEYS:
            shape = next(shape for end, shape in shapes.items() if key.endswith(end) or end + "/" in key)
            params[key] = rng.standard_normal(shape).astype(np.float32)
    return params


# (family, canonical key, the value it gets): each refused, whatever file it comes in.
WRONG = {
    "registers": ("dinov2", "reg", np.zeros((1, 4, D - 1), np.float32)),
    "layer scale": ("dinov2", LAYER_SCALE[1].format(i=1), np.ones(D - 1, np.float32)),
    "distillation token": ("deit", "dist", np.zeros((1, 2, D), np.float32)),
    "distillation head": ("deit", "head_dist/kernel", np.zeros((D, 6), np.float32)),
    "MAP probe": ("siglip", MAP + "probe", np.zeros((1, 1, D + 1), np.float32)),
    "MAP attention": ("siglip", MAP + "MultiHeadDotProductAttention_0/key/kernel", np.zeros((D, HEADS, 7), np.float32)),
    "MAP MLP": ("siglip", MAP + "MlpBlock_0/Dense_0/kernel", np.zeros((D, MLP + 1), np.float32)),
    "boolean patch kernel": ("dinov2", "embedding/kernel", np.ones((8, 8, 3, D), bool)),
    "complex patch kernel": ("deit", "embedding/kernel", np.ones((8, 8, 3, D), np.complex64)),
    "zero-size patch kernel": ("siglip", "embedding/kernel", np.ones((8, 8, 3, 0), np.float32)),
}
EXPECTED = {"distillation token": "'dist' has shape (1, 2, 32)"}


def write_source(reader, params, key, value, path):
    """The checkpoint of canonical `params` with `key` set to `value`, as `reader` reads it:
    an original `.npz`, a timm `.safetensors` or a transformers folder (the writers are given
    float32 of the right shape, then the file's tensor is replaced)."""
    from safetensors.numpy import load_file, save_file

    if reader == "npz":
        np.savez(path, **{**params, key: value})
        return path
    np.savez(path.with_suffix(".npz"), **params)
    ckpt = read_checkpoint(path.with_suffix(".npz"), num_heads=HEADS)
    fmt = formats.by_option({"timm": "timm", "hf": "hf"}[reader])
    if value.dtype == np.float32:
        ckpt.tensors[key] = LazyArray.wrap(value, "edited")
        fmt.write(str(path), ckpt)
        return path
    fmt.write(str(path), ckpt)
    file = path / "model.safetensors" if reader == "hf" else path
    tensors = load_file(file)
    name = next(name for name, t in tensors.items() if t.ndim == 4)  # the patch kernel, (width, 3, patch, patch)
    tensors[name] = np.ascontiguousarray(np.moveaxis(value, (0, 1, 2, 3), (2, 3, 1, 0)))
    try:
        save_file(tensors, file)
    except Exception as error:  # a dtype safetensors cannot store (complex): nothing to read
        pytest.skip(f"safetensors cannot store {value.dtype} ({error})")
    return path


@pytest.mark.parametrize("reader", ["npz", "timm", "hf"])
@pytest.mark.parametrize("case", WRONG)
def test_family_tensors_of_the_wrong_shape_or_dtype_are_never_converted(tmp_path, capsys, reader, case):
    """`convert` wrote family checkpoints whose registers, LayerScale, distillation token /
    head, MAP probe / attention / MLP had the wrong shape, or whose patch kernel was boolean,
    complex or empty (exit 0)."""
    family, key, value = WRONG[case]
    params = family_params(family, np.random.default_rng(0))
    source = write_source(reader, params, key, value, tmp_path / {"npz": "in.npz", "timm": "in.safetensors", "hf": "in"}[reader])
    for output in ("out.npz", "out.safetensors"):
        fits_dtype = value.dtype == np.float32 and value.size
        expected = EXPECTED.get(case, "has shape") if fits_dtype else "accepted: non-empty float16"
        # the canonical check speaks; a file whose layout cannot hold the value is refused by its reader
        fails(["convert", source, tmp_path / output, "--num-heads", HEADS], capsys, str(source),
              *([expected] if reader == "npz" else []))
        assert not (tmp_path / output).exists()


@pytest.mark.parametrize("family", ["deit", "dinov2", "siglip"])
def test_family_checkpoints_of_the_right_shapes_convert(tmp_path, family):
    """The families' fixtures above are right as they are: each converts."""
    from keras_vit.weights import convert_checkpoint

    np.savez(tmp_path / "in.npz", **family_params(family, np.random.default_rng(0)))
    convert_checkpoint(tmp_path / "in.npz", tmp_path / "out.npz")
    assert sorted(np.load(tmp_path / "out.npz").files) == sorted(np.load(tmp_path / "in.npz").files)


def run_limited(script, limit_gib=8, timeout=300):
    """`script` in a subprocess under an address-space limit (an allocation of what a hostile
    file declares raises MemoryError there instead of exhausting the machine) and a time limit
    (a hang fails the test)."""
    code = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({limit_gib * GIB}, {limit_gib * GIB}))\n"
    return subprocess.run([sys.executable, "-c", code + textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "KERAS_BACKEND": BACKEND})


# Runs the cases of one subprocess (each importing Keras first would take most of the time): each
# case's output, its error messages included, follows its own "=== case NAME" line, and what it
# ended with is its last line: "loaded", "exit CODE", "refused LINES MESSAGE" or "failed ERROR".
CASES = """
import sys, traceback
sys.argv = ["keras-vit"]  # as the command line runs
sys.stderr = sys.stdout
for name, code in {cases!r}:
    print("=== case", name, flush=True)
    try:
        exec(code, {{}})
        print("loaded", flush=True)
    except SystemExit as done:
        print("exit", done.code, flush=True)
    except ValueError as error:
        print("refused", str(error).count(chr(10)), str(error), flush=True)
    except BaseException as error:  # a MemoryError, say: told, and the next cases still run
        traceback.print_exc()
        print("failed", type(error).__name__, flush=True)
"""


def run_limited_cases(cases, limit_gib=8, timeout=300):
    """Each of `cases` ({name: Python code}) in turn in one subprocess under `run_limited`'s
    limits; {name: (its output, the line it ended with)}."""
    done = run_limited(CASES.format(cases=list(cases.items())), limit_gib, timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parts = re.split(r"^=== case (.+)\n", done.stdout, flags=re.M)
    outputs = dict(zip(parts[1::2], parts[2::2]))
    assert list(outputs) == list(cases), done.stdout[-3000:] + done.stderr[-3000:]
    return {name: (out, out.rstrip().splitlines()[-1]) for name, out in outputs.items()}


# A layer of a saved model, a field of its configuration and the hostile value it gets.
HOSTILE_CONFIGS = {
    "mlp_dim 1e9": ("Encoder", "mlp_dim", 10**9),
    "depth 1e5": ("Encoder", "depth", 10**5),
    "400000^2 input": ("InputLayer", "batch_shape", [None, 400000, 400000, 3]),
    "50000^2 position grid": ("PositionEmbedding", "grid_size", [50000, 50000]),
    "1e9 classes": ("Dense", "units", 10**9),
    "a string width": ("PatchEmbedding", "hidden_dim", "wide"),
}
LOADERS = {
    "load_model": "from keras_vit.run_folder import load_model\nload_model(path)",
    "from_checkpoint": "import keras_vit\nkeras_vit.from_checkpoint(path)",
    "export": "from keras_vit.cli import main\nraise SystemExit(main(['export', path, '--output', path + '.onnx', "
              "'--format', 'onnx']))",
}


@pytest.fixture(scope="module")
def hostile_models(tmp_path_factory):
    """A tiny saved model, then one copy per `HOSTILE_CONFIGS` with that field changed."""
    import keras_vit

    folder = tmp_path_factory.mktemp("hostile")
    keras_vit.VisionTransformer(**TINY, classes=5, input_shape=(32, 32, 3)).save(folder / "good.keras")
    paths = {}
    for case, (layer_class, field, value) in HOSTILE_CONFIGS.items():
        paths[case] = edit_keras_config(folder / "good.keras", folder / f"{case.replace(' ', '_').replace('^', '')}.keras",
                                        layer_class, field, value)
    return folder / "good.keras", paths


def write_lora(path, member, declared, stored_bytes, compression):
    """A `lora.npz` whose `member` declares a float32 array of shape `declared` and holds
    `stored_bytes` zero bytes (deflated or stored)."""
    settings = json.dumps({"rank": 2, "alpha": 2.0, "targets": ["qkv"], "num_heads": HEADS, "depth": 2})
    with zipfile.ZipFile(path, "w", compression) as zf:
        with zf.open("__settings__.npy", "w") as f:
            np.lib.format.write_array(f, np.array(settings))
        with zf.open(member + ".npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": declared})
            for _ in range(stored_bytes // 2**20):
                f.write(bytes(2**20))
    return path


def write_kerashub_lora(path):
    """A KerasHub `.lora.h5` whose gzip dataset, no chunk written, declares 16 GiB in a few kB."""
    with h5py.File(path, "w") as f:
        f["lora/vars/rank"] = 2
        f.create_dataset("lora/0/vars/lora_kernel_a", shape=(2**16, 2**16), dtype="float32", compression="gzip",
                         chunks=(256, 256))
        f["lora/0/vars/lora_kernel_b"] = np.zeros((2, 8), "float32")
    return path


LORA_FILES = {  # 64 GiB declared in 4 kB; a deflated member that unpacks 1000-fold
    "declared": ((2**16, 2**16, 4), 4096, zipfile.ZIP_STORED, "declares a (65536, 65536, 4) array"),
    "deflated": ((2**12, 2**12), 2**26, zipfile.ZIP_DEFLATED, "declares a (4096, 4096) array"),
}
LORA_CALLS = {
    "read": "from keras_vit.lora import adapter\nadapter.read({path!r})",
    "export": "from keras_vit.cli import main\nraise SystemExit(main(['export', {path!r}, '--format', 'peft', "
              "'--output', {path!r} + '.peft']))",
}


@pytest.fixture(scope="module")
def limited(hostile_models, tmp_path_factory):
    """The memory tests' cases below, run in one subprocess under an 8 GiB address-space limit:
    {case: (its output, its last line)}; the LoRA files (a few kB each) are in `folder`."""
    good, paths = hostile_models
    folder = tmp_path_factory.mktemp("lora")
    cases = {}
    for loader, call in LOADERS.items():
        for name, path in (({} if loader == "export" else {"good": good}) | paths).items():
            cases[f"{loader}: {name}"] = f"path = {str(path)!r}\n{call}"
    for case, (declared, stored, compression, _) in LORA_FILES.items():
        path = write_lora(folder / f"{case}_lora.npz", "encoder/encoderblock_0/attention/qkv/lora_a", declared, stored,
                          compression)
        assert path.stat().st_size < 2**20
        for command, call in LORA_CALLS.items():
            cases[f"lora {command}: {case}"] = call.format(path=str(path))
    path = write_kerashub_lora(folder / "adapter.lora.h5")
    assert path.stat().st_size < 2**20
    cases["lora read: kerashub"] = LORA_CALLS["read"].format(path=str(path))
    return folder, run_limited_cases(cases)


@pytest.mark.parametrize("loader", LOADERS)
def test_keras_configs_declaring_huge_models_are_refused_before_allocating(hostile_models, limited, loader):
    """A 175 kB `.keras` whose configuration declares an MLP 10^9 wide, 10^5 blocks or a
    400000^2 input made load / predict / export allocate it (or build for hours)."""
    good, paths = hostile_models
    _, outcomes = limited
    if loader != "export":  # the model they were made from loads (its export is tested elsewhere)
        assert outcomes[f"{loader}: good"][1] == "loaded", outcomes[f"{loader}: good"][0][-3000:]
    for name, path in paths.items():
        out, last = outcomes[f"{loader}: {name}"]
        assert last.startswith(("exit 2", "refused 0")), out[-3000:]
        assert "MemoryError" not in out and "Traceback" not in out, out[-3000:]
        assert not os.path.exists(str(path) + ".onnx")


SCANNED = "Transformer/encoderblock/LayerNorm_0/scale"  # big_vision's scanned layout: a leading layer axis


def write_huge(reader, path, key, shape):
    """A tiny checkpoint, under `reader`'s container, whose tensor `key` declares `shape` and
    stores nothing (a zero-size shape, or one whose size overflows int64)."""
    params = original_npz_params(np.random.default_rng(0))
    if reader == "npz":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
            for name, value in {**params, key: None}.items():
                with zf.open(name + ".npy", "w") as f:
                    if value is None:
                        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
                    else:
                        np.lib.format.write_array(f, value)
    elif reader == "safetensors":
        from safetensors.numpy import save_file

        save_file({**params, key: np.zeros(shape, np.float32)}, path)  # a zero-size shape only
    elif reader == "torch":
        import torch

        torch.save({**{k: torch.from_numpy(v) for k, v in params.items()}, key: torch.empty(shape)}, path)
    else:  # a Keras `.weights.h5`: the variables of layers, each `vars/<position>`
        with h5py.File(path, "w") as f:
            for i, (name, value) in enumerate({**params, key: None}.items()):
                group = f.create_group(f"layers/layer_{i}/vars")
                group.attrs["name"] = name
                group.create_dataset("0", **({"shape": shape, "dtype": "f4"} if value is None else {"data": value}))
    return path


HUGE = [
    ("npz", SCANNED, (2**40, 0)),  # big_vision's scanned layout: 2^40 blocks to split (a hang)
    ("npz", "embedding/kernel", (2**62, 2**62, 3, 32)),  # a size that overflows int64 (to 0)
    ("safetensors", SCANNED, (2**40, 0)),
    ("torch", SCANNED, (2**40, 0)),
    ("h5", "head/kernel", (0, 2**40)),
]


@pytest.mark.parametrize("reader, key, shape", HUGE, ids=[f"{r}-{k.split('/')[-2]}" for r, k, _ in HUGE])
def test_files_declaring_huge_tensors_are_refused_by_every_reader(tmp_path, reader, key, shape):
    """A few kB file whose tensor declares a shape of 2^40 rows, empty, or a size past int64
    made `convert` hang splitting it into blocks or ask for exabytes; each reader's declared
    shapes are bounded as they are read (`keras_vit.utils.limits`), before any size is computed."""
    suffix = {"npz": ".npz", "safetensors": ".safetensors", "torch": ".pth", "h5": ".weights.h5"}[reader]
    source = write_huge(reader, tmp_path / ("in" + suffix), key, shape)
    assert source.stat().st_size < 2**20
    script = f"""
        import sys
        sys.argv = ["keras-vit"]
        from keras_vit.cli import main
        print("rc", main(["convert", {str(source)!r}, {str(tmp_path / "out.npz")!r}, "--num-heads", "4"]), flush=True)
    """
    done = run_limited(script, limit_gib=3, timeout=120)
    assert "rc 2" in done.stdout, done.stdout + done.stderr[-3000:]
    assert f"declares shape {shape}" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("case", LORA_FILES)
@pytest.mark.parametrize("command", LORA_CALLS)
def test_lora_files_declaring_huge_arrays_are_refused_before_reading(limited, case, command):
    """`lora.read` / `lora.load` and `keras-vit export ADAPTER` read a `lora.npz` with `np.load`,
    which allocated what a member declared and inflated a deflated one whole; it is read as
    checkpoints are (`containers.read_npz`: declared sizes against stored, the inflation limit)."""
    folder, outcomes = limited
    out, last = outcomes[f"lora {command}: {case}"]
    assert last.startswith("refused 0" if command == "read" else "exit 2"), out[-3000:]
    assert LORA_FILES[case][3] in out and "Traceback" not in out, out[-3000:]
    assert not (folder / f"{case}_lora.npz.peft").exists()


def test_a_kerashub_lora_file_declaring_a_huge_array_is_refused_before_reading(limited):
    """`lora.read` of a KerasHub `.lora.h5` read each matrix whole with h5py: a gzip dataset
    with no chunk written declares 16 GiB in a few kB. It is read as `.weights.h5` checkpoints
    are (the declared size against what is stored)."""
    out, last = limited[1]["lora read: kerashub"]
    assert last.startswith("refused 0") and "declares a (65536, 65536) tensor" in last, out[-3000:]
