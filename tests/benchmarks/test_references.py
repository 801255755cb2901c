"""benchmarks/jax_vit.py (the plain JAX reference of throughput.py) computes a ViT, and
throughput.py runs it and the compiled PyTorch references' names."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support import BACKEND
from benchmarks.numpy_vit import vit_forward
from tests.support.benchmarks import BENCHMARKS

import throughput  # noqa: E402  (benchmarks/ is on sys.path via tests.support.benchmarks)

jax_only = pytest.mark.skipif(BACKEND != "jax", reason="jax_vit is JAX code")


@jax_only
def test_jax_vit_forward_matches_numpy_reference():
    import jax.numpy as jnp
    import jax_vit

    arch = (4, 16, 2, 2, 32)
    params = jax_vit.init_params(arch, 8, classes=5, seed=1)
    rng = np.random.default_rng(2)
    params["cls"] = rng.normal(0, 0.5, params["cls"].shape).astype("float32")
    params["head"]["w"] = rng.normal(0, 0.5, params["head"]["w"].shape).astype("float32")
    images = rng.uniform(-1, 1, (2, 8, 8, 3)).astype("float32")
    got = np.asarray(jax_vit.make_forward(arch, jnp.float32)(params, images))
    width = 16
    blocks = []
    for p in params["blocks"]:
        w, b = p["qkv"]["w"], p["qkv"]["b"]
        blocks.append({
            "ln1_s": p["ln1"]["scale"], "ln1_b": p["ln1"]["bias"], "ln2_s": p["ln2"]["scale"], "ln2_b": p["ln2"]["bias"],
            "q_w": w[:, :width], "k_w": w[:, width:2 * width], "v_w": w[:, 2 * width:],
            "q_b": b[:width], "k_b": b[width:2 * width], "v_b": b[2 * width:],
            "o_w": p["out"]["w"], "o_b": p["out"]["b"], "fc1_w": p["fc1"]["w"], "fc1_b": p["fc1"]["b"],
            "fc2_w": p["fc2"]["w"], "fc2_b": p["fc2"]["b"],
        })
    reference = {"embed_w": params["embed"]["w"], "embed_b": params["embed"]["b"], "cls": params["cls"].reshape(width),
                 "pos": params["pos"][0], "blocks": blocks, "norm_s": params["norm"]["scale"],
                 "norm_b": params["norm"]["bias"], "head_w": params["head"]["w"], "head_b": params["head"]["b"]}
    want, _ = vit_forward(images, reference, 4, 2, approximate_gelu=False)
    np.testing.assert_allclose(got, want, atol=1e-4)


@jax_only
def test_throughput_script_measures_the_jax_reference(tmp_path):
    out = tmp_path / "result.json"
    command = [sys.executable, os.path.join(BENCHMARKS, "throughput.py"), "--variant", "ViTTi16", "--resolution", "32",
               "--batch", "2", "--rounds", "1", "--warmup", "1", "--frameworks", "jax_vit", "--json", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert {r["mode"] for r in results} == {"inference", "training"}
    assert all(r["error"] is None and r["images_per_s"] > 0 for r in results)


def test_framework_names():
    assert throughput.split_framework("keras_vit/jax") == ("keras_vit", "jax", False)
    assert throughput.split_framework("transformers/compiled") == ("transformers", "torch", True)
    assert throughput.split_framework("transformers") == ("transformers", "torch", False)
    assert throughput.split_framework("jax_vit") == ("jax_vit", "jax", False)
    assert throughput.resolve_frameworks(["transformers/compiled", "jax_vit"]) == ["transformers/compiled", "jax_vit"]
