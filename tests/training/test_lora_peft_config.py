"""PEFT adapters are what they say (issue 42, class 4): an `adapter_config.json` whose alpha,
patterns, rank or target modules PEFT would refuse or read otherwise is refused in one line, never
read into a model of NaNs or converted silently; a PEFT folder exported to KerasHub is named in
the error."""

import json
import math
import os
import shutil

import pytest

import keras_vit
from keras_vit.utils import files
from keras_vit.cli import main
from keras_vit.lora import adapter as lora

ARCH = dict(patch_size=4, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32, input_shape=(16, 16, 3), classes=3)


@pytest.fixture(scope="module")
def peft_folder(tmp_path_factory):
    """A PEFT folder of a rank-2 adapter on qkv and out (as keras_vit writes it)."""
    model = keras_vit.VisionTransformer(**ARCH)
    lora.enable(model, 2)
    folder = tmp_path_factory.mktemp("peft") / "adapter"
    lora.save(model, folder, layout="peft")
    return folder


# adapter_config.json changes PEFT refuses or reads otherwise: (change, what the line says).
BAD_CONFIGS = {
    "lora_alpha NaN": ({"lora_alpha": math.nan}, "lora_alpha=nan"),
    "lora_alpha infinite": ({"lora_alpha": math.inf}, "lora_alpha=inf"),
    "lora_alpha zero": ({"lora_alpha": 0}, "lora_alpha=0"),
    "lora_alpha negative": ({"lora_alpha": -2}, "lora_alpha=-2"),
    "lora_alpha a string": ({"lora_alpha": "8"}, "lora_alpha='8'"),
    "lora_alpha a list": ({"lora_alpha": [8]}, "lora_alpha=[8]"),
    "lora_alpha a bool": ({"lora_alpha": True}, "lora_alpha=True"),
    "alpha_pattern NaN": ({"alpha_pattern": {"k_proj": math.nan}}, "alpha_pattern values"),
    "alpha_pattern a string": ({"alpha_pattern": {"k_proj": "7"}}, "alpha_pattern values"),
    "alpha_pattern a list value": ({"alpha_pattern": {"k_proj": [7]}}, "alpha_pattern values"),
    "alpha_pattern zero": ({"alpha_pattern": {"k_proj": 0}}, "alpha_pattern values"),
    "alpha_pattern a list": ({"alpha_pattern": ["k_proj"]}, "alpha_pattern=['k_proj']"),
    "alpha_pattern bad pattern": ({"alpha_pattern": {"k_proj(": 2}}, "is not a regular expression"),
    "rank zero": ({"r": 0}, "r=0"),
    "rank a string": ({"r": "2"}, "r='2'"),
    "rank a float": ({"r": 2.5}, "r=2.5"),
    "rank not the tensors'": ({"r": 3}, "its rank 3"),
    "rank_pattern not the tensors'": ({"rank_pattern": {"q_proj": 5}}, "its rank 5"),
    "rank_pattern zero": ({"rank_pattern": {"q_proj": 0}}, "rank_pattern values"),
    "target_modules matching nothing": ({"target_modules": ["query", "value"]}, "does not match"),
    "target_modules missing a module": ({"target_modules": ["q_proj", "k_proj", "v_proj"]}, "does not match"),
    "target_modules regex matching nothing": ({"target_modules": r".*\.nothing"}, "does not match"),
    "target_modules bad regex": ({"target_modules": "(q_proj"}, "is not a regular expression"),
    "target_modules a number": ({"target_modules": 3}, "target_modules=3"),
    "use_rslora a string": ({"use_rslora": "yes"}, "use_rslora='yes'"),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_a_peft_config_peft_would_refuse_or_read_otherwise_is_refused_in_one_line(peft_folder, tmp_path, case, capsys):
    change, said = BAD_CONFIGS[case]
    folder = tmp_path / "adapter"
    shutil.copytree(peft_folder, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError) as refused:
        lora.read(folder)
    assert "\n" not in str(refused.value) and said in str(refused.value) and str(folder) in str(refused.value)
    out = tmp_path / "lora.npz"
    assert main(["export", str(folder), "--format", "npz", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and not os.path.exists(out), err


@pytest.mark.backend_independent
def test_exporting_a_peft_folder_to_kerashub_names_the_folder(peft_folder, tmp_path, capsys):
    out = tmp_path / "adapter.lora.h5"
    assert main(["export", str(peft_folder), "--format", "kerashub", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{peft_folder}: the adapter records no head count" in err, err
    assert files.TMP_PREFIX not in err and not os.listdir(tmp_path)
