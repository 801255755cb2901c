"""Few-shot linear evaluation (paper 4.1): the ridge regression against scikit-learn, the
representation, the `evaluate --fewshot` command and the training callback."""

import csv

import keras
import numpy as np
import pytest
from sklearn.linear_model import Ridge

import keras_vit
from keras_vit.cli import main
from keras_vit.evaluation import fewshot

TINY = dict(patch_size=4, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32, input_shape=(16, 16, 3))


def sklearn_predictions(x, y, x_test, num_classes, l2):
    """The same problem solved by scikit-learn: standardised features plus a constant 100
    column, ridge regression to the ±1 codes without a separate intercept."""
    mean, std = x.mean(0), x.std(0) + 1e-5

    def design(f):
        return np.hstack([(f - mean) / std, np.full((len(f), 1), 100.0)])

    codes = 2.0 * np.eye(num_classes)[y] - 1.0
    ridge = Ridge(alpha=l2, fit_intercept=False, solver="cholesky").fit(design(x), codes)
    return ridge.predict(design(x_test)).argmax(1)


@pytest.mark.parametrize("points", [6, 200])  # fewer points than features (dual form), more (primal)
@pytest.mark.parametrize("l2", [1.0, 2.0**10])
def test_ridge_classifier_matches_scikit_learn(points, l2):
    rng = np.random.default_rng(points)
    centres = 3 * rng.standard_normal((3, 20))
    y = np.arange(points) % 3
    x = centres[y] + 2 * rng.standard_normal((points, 20))
    x_test = centres[np.arange(300) % 3] + 2 * rng.standard_normal((300, 20))
    predict = fewshot.ridge_classifier(x, y, 3, l2)
    np.testing.assert_array_equal(predict(x_test), sklearn_predictions(x, y, x_test, 3, l2))


def test_fewshot_accuracy_draws_shots_per_class_and_seed():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, 8))
    labels = rng.permutation(np.arange(200) % 4)
    features = centres[labels] + 0.8 * rng.standard_normal((200, 8))
    test_labels = np.arange(100) % 4
    test = centres[test_labels] + 0.8 * rng.standard_normal((100, 8))
    results = fewshot.fewshot_accuracy(features, labels, test, test_labels, shots=(1, 10), seeds=3)
    for seed in range(3):  # the independent draw: per class, a seeded permutation's first k
        draw = np.random.default_rng(seed)
        orders = [draw.permutation(np.flatnonzero(labels == c)) for c in range(4)]
        for k in (1, 10):
            chosen = np.concatenate([o[:k] for o in orders])
            expected = np.mean(sklearn_predictions(features[chosen], labels[chosen], test, 4, 2.0**10) == test_labels)
            assert results[k][seed] == pytest.approx(expected)
    assert np.mean(results[10]) > np.mean(results[1])
    with pytest.raises(ValueError, match="51-shot needs 51 training images per class; the smallest class has 50"):
        fewshot.fewshot_accuracy(features, labels, test, test_labels, shots=(51,))


def run(model, images):
    return keras.ops.convert_to_numpy(model(images, training=False))


def test_representation_is_the_pre_logits_or_a_pooled_block():
    classifier = keras_vit.VisionTransformer(**TINY, classes=5, pooling="avg")
    images = np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")
    tokens = keras_vit.features(classifier, images, -1, norm=True)
    pre_logits = run(fewshot.representation_model(classifier), images)
    np.testing.assert_allclose(pre_logits, tokens[:, 1:].mean(1), atol=1e-5)
    block0 = keras_vit.features(classifier, images, 0)
    np.testing.assert_allclose(run(fewshot.representation_model(classifier, 0, "token"), images), block0[:, 0], atol=1e-5)
    encoder = keras_vit.VisionTransformer(**TINY, include_top=False)  # the token sequence: class token
    np.testing.assert_allclose(
        run(fewshot.representation_model(encoder), images),
        keras_vit.features(encoder, images, -1, norm=True)[:, 0], atol=1e-5,
    )


def test_evaluate_on_digits_and_the_command(tmp_path, capsys):
    model = keras_vit.VisionTransformer(**TINY, include_top=False, pooling="avg", seed=0)
    scores = fewshot.evaluate(model, "digits", shots=(1, 5), seeds=2)
    assert set(scores) == {"1shot", "5shot"} and 0.15 < scores["1shot"] < scores["5shot"] <= 1
    path = tmp_path / "encoder.keras"
    model.save(path)
    assert main(["evaluate", str(path), "--data", "digits", "--fewshot", "1,5", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert f"1-shot  {scores['1shot']:.4f}" in out and f"5-shot  {scores['5shot']:.4f}" in out
    assert main(["evaluate", str(path), "--data", "digits", "--fewshot", "1,x"]) == 2
    assert "--fewshot '1,x' must be shot counts" in capsys.readouterr().err


def test_training_logs_fewshot_every_n_steps(tmp_path):
    from keras_vit.training import train

    run = tmp_path / "run"
    train("digits", output_dir=str(run), steps=6, batch_size=32, reference_batch_size=32, image_size=8,
          patch_size=2, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, fewshot_every=2, tensorboard=False, verbose=0)
    with open(run / "fewshot.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["step"] for row in rows] == ["2", "4", "6"]
    assert set(rows[0]) == {"step", "1shot", "5shot", "10shot", "25shot"}
    with open(run / "log.csv") as handle:
        logged = list(csv.DictReader(handle))
    assert len(logged) == 1 and float(logged[0]["fewshot_10shot"]) == pytest.approx(float(rows[-1]["10shot"]), abs=1e-6)
