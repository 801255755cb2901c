"""A resume continues the same model or refuses in one line (issue 42, class 2): the fingerprint
holds every field of the model group (the architecture, each block option, the NaFlex budgets),
derived from the declarations; `state.json`'s fields are checked by type and range."""

import dataclasses
import json
import os
import shutil

import h5py
import pytest

from keras_vit.training import checkpointing, engine
from keras_vit.training.config import MODEL, TrainConfig
from keras_vit.training.recipes import recipe
from keras_vit.training.trainer import Classification
from tests.support import JIT
from tests.support.commands import run_quietly, snapshot

FLAGS = [
    "--image-size", "8", "--patch-size", "4", "--hidden-dim", "16", "--depth", "1", "--num-heads", "2",
    "--mlp-dim", "16", "--batch-size", "32", "--tensorboard", "false", "--verbose", "0",
    "--set", f"jit_compile={JIT}",
]
NAFLEX = ["--set", "naflex_seq_lens=4,8", "--set", "class_token=false", "--pooling", "avg"]

# Another value of each fingerprinted field of the model group (with what it needs beside it).
OTHER = {
    "model": {"model": "ViTS16"},
    "patch_size": {"patch_size": 2},
    "hidden_dim": {"hidden_dim": 32},
    "depth": {"depth": 2},
    "num_heads": {"num_heads": 4},
    "mlp_dim": {"mlp_dim": 32},
    "pooling": {"pooling": "token"},
    "class_token": {"class_token": False, "pooling": "avg"},
    "naflex_seq_lens": {"naflex_seq_lens": (4, 16), "class_token": False, "pooling": "avg"},
    "naflex_pack": {"naflex_pack": True, "naflex_seq_lens": (4, 8), "class_token": False, "pooling": "avg"},
    "representation_size": {"representation_size": 8},
    "linear_probe": {"linear_probe": True},
    "lora_rank": {"lora_rank": 2},
    "lora_targets": {"lora_targets": "qkv"},
    "position_embedding": {"position_embedding": "sincos2d"},
    "layer_scale_init": {"layer_scale_init": 1e-5},
    "key_bias": {"key_bias": False},
    "qkv_bias": {"qkv_bias": False},
    "proj_bias": {"proj_bias": False},
    "mlp_bias": {"mlp_bias": False},
    "distillation_token": {"distillation_token": True, "pooling": "token"},
    "qk_norm": {"qk_norm": True},
    "norm": {"norm": "rmsnorm"},
    "mlp": {"mlp": "swiglu"},
    "patch_norm": {"patch_norm": True},
    "sincos_form": {"sincos_form": "mae", "position_embedding": "sincos2d"},
    "preprocessing": {"preprocessing": "clip"},
    "head": {"head": "dpt"},
    "freeze_backbone": {"freeze_backbone": True, "task": "segmentation"},
}
BASE = recipe("digits").replace(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=16, image_size=8)
TASK = Classification()


def _weights_file(path):
    with h5py.File(path, "w") as handle:
        handle["vars/0"] = [0.0]


@pytest.mark.backend_independent
def test_every_model_option_is_in_the_fingerprint_by_construction():
    model_group = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata["group"] == MODEL}
    assert set(OTHER) == model_group - set(engine.RESUMABLE)  # a new option of the model group is fingerprinted
    assert set(OTHER) <= set(engine.fingerprint_fields(TASK))


@pytest.mark.backend_independent
@pytest.mark.parametrize("field", OTHER)
def test_resuming_with_another_model_option_is_refused_in_one_line(tmp_path, field):
    folder = tmp_path / "run" / "checkpoint"
    folder.mkdir(parents=True)
    _weights_file(folder / "step-3.weights.h5")
    saved = engine.fingerprint(TASK, BASE, "digits")
    (folder / "state.json").write_text(json.dumps({"step": 3, "weights": "step-3.weights.h5", "fingerprint": saved}))
    other = engine.fingerprint(TASK, BASE.replace(**OTHER[field]), "digits")
    state = checkpointing.RunState(str(tmp_path / "run"), None, fingerprint=other)
    with pytest.raises(checkpointing.SettingsChanged) as refused:
        state.restore(None)
    message = str(refused.value)
    assert "\n" not in message and f"{field}: {saved[field]!r} -> {other[field]!r}" in message






@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`{"plain": run folder, "naflex": run folder}` of one step each."""
    found = {}
    for kind, extra in (("plain", []), ("naflex", NAFLEX)):
        run_dir = tmp_path_factory.mktemp(kind) / "run"
        code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, *extra, "--steps", "1"])
        assert code == 0, err
        found[kind] = run_dir
    return found


# A resume with another block option or NaFlex budget: (the run, the flags, the setting named).
RESUMES = {
    "key_bias": ("plain", ["--set", "key_bias=false"], "key_bias: None -> False"),
    "qk_norm": ("plain", ["--set", "qk_norm=true"], "qk_norm: None -> True"),
    "norm": ("plain", ["--set", "norm=rmsnorm"], "norm: None -> 'rmsnorm'"),
    "mlp": ("plain", ["--set", "mlp=swiglu"], "mlp: None -> 'swiglu'"),
    "naflex budgets": ("naflex", [*NAFLEX, "--set", "naflex_seq_lens=4,16"], "naflex_seq_lens: [4, 8] -> [4, 16]"),
}


@pytest.mark.parametrize("case", RESUMES)
def test_a_resume_with_another_block_option_or_budget_is_refused_nothing_written(runs, tmp_path, case):
    kind, extra, named = RESUMES[case]
    run_dir = tmp_path / "run"
    shutil.copytree(runs[kind], run_dir)
    before = snapshot(run_dir)
    code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, *extra, "--steps", "2"])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert named in err and "--fresh" in err and "--output-dir" in err, err
    assert snapshot(run_dir) == before


# state.json fields of the wrong type or range: (field, value).
BAD_STATES = {
    "step a string": ("step", "5"),
    "step negative": ("step", -1),
    "step a bool": ("step", True),
    "step a float": ("step", 5.0),
    "best a string": ("best", "0.9"),
    "best NaN": ("best", float("nan")),
    "best_epoch zero": ("best_epoch", 0),
    "best_epoch a list": ("best_epoch", [1]),
    "fingerprint null": ("fingerprint", None),
    "fingerprint a list": ("fingerprint", ["data"]),
    "fingerprint missing": ("fingerprint", KeyError),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", BAD_STATES)
def test_a_state_field_of_the_wrong_type_or_range_is_refused_in_one_line(tmp_path, case):
    field, value = BAD_STATES[case]
    folder = tmp_path / "run" / "checkpoint"
    folder.mkdir(parents=True)
    _weights_file(folder / "step-5.weights.h5")
    state = {"step": 5, "weights": "step-5.weights.h5", "best": 0.5, "best_epoch": 1, "fingerprint": {"seed": 0}}
    if value is KeyError:
        del state[field]
    else:
        state[field] = value
    (folder / "state.json").write_text(json.dumps(state))
    run = checkpointing.RunState(str(tmp_path / "run"), None, fingerprint={"seed": 0})
    with pytest.raises(checkpointing.BadRunState, match=f"has {field} ") as refused:
        run.restore(None)
    assert "\n" not in str(refused.value)
    assert os.listdir(folder) and sorted(os.listdir(folder)) == ["state.json", "step-5.weights.h5"]


def test_a_step_past_the_runs_end_is_refused_in_one_line(runs, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(runs["plain"], run_dir)
    state = run_dir / "checkpoint" / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "step": 50}))
    os.rename(run_dir / "checkpoint" / "step-1.weights.h5", run_dir / "checkpoint" / "step-50.weights.h5")
    state.write_text(json.dumps({**json.loads(state.read_text()), "weights": "step-50.weights.h5"}))
    before = snapshot(run_dir)
    code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, "--steps", "2"])
    assert code == 2 and err.count("\n") == 1 and "is at step 50, past the end of this run (2 steps)" in err, err
    assert snapshot(run_dir) == before
