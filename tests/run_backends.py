"""Runs the whole test suite once per Keras backend, each in its own process.

Usage: python tests/run_backends.py [--jobs N] [--quick] [BACKEND ...] [-- PYTEST_ARGS ...]

Each backend runs the suite in parts (`PARTS`), each part a pytest process; up to `--jobs` of
them (default: one per CPU core) run at the same time, the longest first by `SECONDS`, so that
the cores finish together. Most tests are small models whose time goes to one core's Python and
dispatch, so on two cores two parts take little longer than one. Each part's output is printed
whole when it ends, with its 30 slowest tests. With PYTEST_ARGS a backend runs as one process:
`pytest PYTEST_ARGS` (the whole suite unless they name paths). `--quick` runs the fast tier,
`QUICK`, on PyTorch (or the backends named) in one process: a few tests of every package, for
use before every commit.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

BACKENDS = ("jax", "tensorflow", "torch")
# The parts of each backend's suite: the folders of each, "the rest" every test the others leave.
PARTS = {
    "training": ("tests/training",),
    "weights": ("tests/weights",),
    "the rest": ("tests", "--ignore=tests/training", "--ignore=tests/weights"),
}
# Seconds each part takes on the 2-core CI machine, two at a time (the `=== backend, part: ... in
# Ns` lines of a CI log; here the last CI's): only their order
# matters, the longest starting first.
SECONDS = {
    ("jax", "training"): 539, ("jax", "weights"): 152, ("jax", "the rest"): 585,
    ("tensorflow", "training"): 326, ("tensorflow", "weights"): 68, ("tensorflow", "the rest"): 360,
    ("torch", "training"): 255, ("torch", "weights"): 63, ("torch", "the rest"): 388,
}
DEFAULT_ARGS = ("--durations=30",)  # the slowest tests of each part, for keeping CI time down
# The fast tier (`--quick`): a few quick tests of every package, under 3 minutes on PyTorch on the
# CI machine. Node ids: pytest fails ("not found") on one that no longer exists.
QUICK = (
    "tests/test_files.py", "tests/test_files_json.py", "tests/test_imports.py",
    "tests/test_images.py::test_read_image_decodes_as_tensorflow",
    "tests/test_docs.py::test_shell_lines_name_what_exists", "tests/test_docs.py::test_the_field_table_is_current",
    "tests/layers/test_forward.py::test_logits_match_numpy_reference",
    "tests/layers/test_forward.py::test_layer_config_round_trip",
    "tests/applications/test_builders.py",
    "tests/training/test_family_models.py::test_an_unknown_model_is_refused_listing_what_is_accepted",
    "tests/weights/test_recorded_options.py::test_metadata_holds_config_fields_checked_by_their_declarations",
    "tests/applications/test_default_weights.py",
    "tests/weights/test_keras_files.py::test_a_keras_file_of_the_previous_layout_loads",
    "tests/applications/test_families_builders.py::test_parameter_counts_match_the_references",
    "tests/applications/test_hybrid.py::test_stem_rejects_bad_configs",
    "tests/weights/test_table.py::test_table_expands_found_indices_both_ways_and_names_what_is_wrong",
    "tests/weights/test_formats.py::test_npz_round_trip_is_bit_exact",
    "tests/weights/test_formats.py::test_hf_small_variant_round_trip",
    "tests/weights/test_errors.py",
    "tests/weights/test_integrity.py::test_corrupt_npz_member_fails_load_and_convert",
    "tests/weights/test_download.py::test_download_checks_hash_and_caches",
    "tests/weights/test_hostile_new_readers.py::test_open_clip_preprocess_cfg_mean_and_std",
    "tests/weights/test_hostile_new_readers.py::test_head_files_damaged_or_of_other_dtypes_are_refused_in_one_line",
    "tests/inspect/test_inspect.py::test_patch_embedding_components",
    "tests/inspect/test_inspect.py::test_attention_rollout_maps",
    "tests/inference/test_hostile_inputs.py",
    "tests/inference/test_export_formats.py::test_an_unknown_format_is_refused_in_one_line",
    "tests/inference/test_export_formats.py::test_format_all_writes_every_format",
    "tests/cli/test_cli.py::test_every_option_shows_what_it_takes",
    "tests/cli/test_cli.py::test_parsed_options_override_the_recipe",
    "tests/cli/test_errors.py::test_lora_options_out_of_range_are_refused",
    "tests/benchmarks/test_throughput.py::test_flops_per_image_match_the_published_peak_throughputs",
    "tests/benchmarks/test_targets.py::test_ratio_table_against_the_targets",
    "tests/training/test_data.py::test_train_stream_is_reproducible_and_resumable",
    "tests/training/test_data.py::test_inception_crop_windows_and_centre_crop",
    "tests/training/test_recipes.py", "tests/training/test_engine.py::test_a_bad_choice_fails_before_data_or_weights",
    "tests/training/test_engine.py::test_pretrain_logged_to_a_file_writes_one_line_per_epoch",
    "tests/training/test_layer_decay.py::test_sgd_step_is_scaled_per_block",
    "tests/training/test_fewshot.py::test_ridge_classifier_matches_scikit_learn",
    "tests/training/test_distill.py::test_bad_options_are_refused_in_one_line",
    "tests/training/test_lora.py::test_a_file_that_is_not_a_lora_file_is_refused_in_one_line",
    "tests/training/test_run_folder.py::test_a_model_file_that_is_a_fifo_is_refused_without_blocking",
    "tests/training/test_resume_fingerprint.py::test_every_model_option_is_in_the_fingerprint_by_construction",
    "tests/layers/test_naflex_poison.py::test_bad_arguments_are_refused_in_one_line",
    "tests/text/test_text_layers.py",
    "tests/weights/test_clip.py::test_clip_builder_without_weights_and_bad_options",
    "tests/dense/test_resize.py", "tests/dense/test_model.py::test_bad_arguments_are_refused_in_one_line",
    "tests/dense/test_losses.py::test_cross_entropy_skips_the_ignore_label", "tests/dense/test_data.py",
    "tests/dense/test_eomt_loss.py::test_losses_and_matching_equal_transformers",
    "tests/inference/test_serving_card.py::test_a_pytorch_program_ends_in_pt2",
    "tests/text/test_names.py::test_unknown_names_are_refused_in_one_line",
    "tests/text/test_eva_clip_pe_core.py::test_named_models_have_timm_s_numbers_and_entries",
    "tests/inference/test_export_dense.py::test_several_outputs_are_paired_by_name_then_shape",
    "tests/dense/test_named.py::test_offline_is_one_line_naming_the_cache_folder",
    "tests/dense/test_dinov2_heads.py::test_head_files_give_dinov2s_logits",
    "tests/dense/test_dinov2_heads.py::test_files_that_do_not_fit_are_refused_in_one_line",
    "tests/dense/test_sliding.py::test_tiling_and_averaging_match_numpy",
    "tests/dense/test_tfds_data.py::test_cityscapes_label_ids_become_the_19_train_ids",
    "tests/training/test_checkpoint_scaling.py::test_the_pipelines_normalise_by_the_preprocessing",
)
COUNT = re.compile(r"(\d+) (passed|failed|skipped|error|errors)\b")


def threads_of(jobs):
    """The environment that gives each of `jobs` pytest processes (and the processes they start)
    its share of the cores to compute on: PyTorch's, TensorFlow's and XLA's thread pools are each
    as wide as the machine, and several processes' pools would take turns on the same cores."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    env = {"OMP_NUM_THREADS": str(threads), "TF_NUM_INTRAOP_THREADS": str(threads)}
    if threads == 1:
        env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_multi_thread_eigen=false".strip()
    return env


def run(backend, part, paths, pytest_args, jax_cache, threads):
    """Runs pytest on `paths` under `backend` (`threads`: `threads_of`; `jax_cache`: the JAX
    compilation cache all the processes share, as the same tiny programs compile in several parts
    and their children); prints its output when it ends and returns the counts."""
    env = {**os.environ, **threads, "KERAS_BACKEND": backend, "JAX_COMPILATION_CACHE_DIR": jax_cache}
    command = [sys.executable, "-m", "pytest", *paths, *DEFAULT_ARGS, *pytest_args]
    print(f"=== KERAS_BACKEND={backend} ({part}): started {' '.join(command)}", flush=True)
    start = time.time()
    with tempfile.TemporaryFile("w+") as log:
        returncode = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True).returncode
        log.seek(0)
        output = log.read()
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    tail = output.strip().splitlines()[-1:] or [""]
    for number, word in COUNT.findall(tail[0]):
        counts["failed" if word.startswith("error") else word] += int(number)
    if returncode not in (0, 5) and counts["failed"] == 0:
        counts["failed"] = 1  # pytest itself failed (collection error, crash)
    sys.stdout.write(f"\n=== KERAS_BACKEND={backend} ({part}) output\n{output}")
    print(f"=== {backend}, {part}: {counts} in {time.time() - start:.0f}s", flush=True)
    return counts


def parse(argv):
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="pytest processes at the same time (default: one per core)")
    parser.add_argument("--quick", action="store_true", help="the fast tier only, on torch unless backends are named")
    parser.add_argument("backends", nargs="*", metavar="BACKEND", help=f"some of {', '.join(BACKENDS)} (default: all)")
    args = parser.parse_args(argv[:split])
    unknown = sorted(set(args.backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; expected some of {', '.join(BACKENDS)}")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    backends = args.backends or (["torch"] if args.quick else list(BACKENDS))
    return args.jobs, args.quick, backends, argv[split + 1 :]


def plan(backends, quick, pytest_args):
    """(backend, part, paths) of each pytest process, the longest first."""
    if quick:
        return [(backend, "quick", QUICK) for backend in backends]
    if pytest_args:
        return [(backend, "as given", ()) for backend in backends]  # no path given: pytest's testpaths
    runs = [(backend, part, paths) for backend in backends for part, paths in PARTS.items()]
    return sorted(runs, key=lambda job: -SECONDS.get(job[:2], 0))


def main(argv):
    jobs, quick, backends, pytest_args = parse(argv)
    runs = plan(backends, quick, pytest_args)
    start = time.time()
    threads = threads_of(min(jobs, len(runs)))
    with ThreadPoolExecutor(jobs) as pool, tempfile.TemporaryDirectory(prefix="keras_vit_tests_jax_cache_") as cache:
        results = list(pool.map(lambda job: run(*job, pytest_args, cache, threads), runs))
    totals = {key: sum(counts[key] for counts in results) for key in ("passed", "failed", "skipped")}
    print(f"\n{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped "
          f"({len(backends)} backends, {len(runs)} processes, {min(jobs, len(runs))} at a time, "
          f"{time.time() - start:.0f}s)")
    return 1 if totals["failed"] or not totals["passed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
