"""`keras-vit evaluate` and `keras-vit predict` on a NaFlex run folder: each image at its own
aspect ratio through `naflex_inputs` under the run's budget (the largest of its
`naflex_seq_lens`, not the position table's), as `naflex_inputs` + `model.predict` give it."""

import json
import re

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli import main
from keras_vit.evaluation.classification import recorded_source

SEQ_LENS = [4, 9]  # the position table has 16 patches: a budget of 16 would be wrong


@pytest.fixture(scope="module")
def run_model(tmp_path_factory):
    """A NaFlex classifier saved in a run folder whose config.json trained it at SEQ_LENS on digits."""
    run_dir = tmp_path_factory.mktemp("naflex") / "run"
    run_dir.mkdir()
    keras.utils.set_random_seed(3)
    model = keras_vit.VisionTransformer(patch_size=2, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        class_token=False, pooling="avg", naflex=True, input_shape=(8, 8, 3),
                                        classes=10, classifier_activation="softmax", preprocessing="vit")
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32") * 0.5)
    model.save(run_dir / "final.keras")
    (run_dir / "config.json").write_text(json.dumps({"data": "digits", "naflex_seq_lens": SEQ_LENS, "seed": 0}))
    (run_dir / "classes.json").write_text(json.dumps({"class_names": [str(i) for i in range(10)], "image_size": 8}))
    return run_dir / "final.keras", model


def _probabilities(model, images, budget):
    return model.predict(keras_vit.naflex_inputs(images, model, max_num_patches=budget), verbose=0)


def test_evaluate_feeds_each_image_under_the_runs_budget(run_model, capsys):
    path, model = run_model
    pairs = list(recorded_source(str(path)).validation.as_numpy_iterator())
    images, labels = [image for image, _ in pairs], np.array([label for _, label in pairs])

    def top1_and_loss(budget):
        probabilities = _probabilities(model, images, budget)
        picked = probabilities[np.arange(len(labels)), labels]
        return np.mean(probabilities.argmax(axis=1) == labels), -np.mean(np.log(picked))

    top1, loss = top1_and_loss(max(SEQ_LENS))
    assert abs(top1_and_loss(16)[1] - loss) > 1e-2  # the budget matters
    assert main(["evaluate", str(path)]) == 0
    found = re.search(r"on 359 validation examples: top-1 (\S+), top-5 \S+, loss (\S+)", capsys.readouterr().out)
    assert found, "no result line"
    assert found.group(1).rstrip(",") == f"{top1:.4f}" and abs(float(found.group(2)) - loss) < 1e-3


def test_predict_feeds_each_image_under_the_runs_budget(run_model, tmp_path, capsys):
    path, model = run_model
    image = np.random.default_rng(1).integers(0, 256, (10, 14, 3), dtype=np.uint8)  # not square
    Image.fromarray(image).save(tmp_path / "wide.png")
    expected = _probabilities(model, [image], max(SEQ_LENS))[0]
    assert np.abs(_probabilities(model, [image], 16)[0] - expected).max() > 1e-3  # the budget matters
    assert main(["predict", str(tmp_path / "wide.png"), "--model", str(path), "--top", "10"]) == 0
    printed = re.findall(r"(\d\.\d{4})  \(class (\d)\)", capsys.readouterr().out)
    assert len(printed) == 10
    for probability, index in printed:
        assert abs(float(probability) - expected[int(index)]) < 1e-4
