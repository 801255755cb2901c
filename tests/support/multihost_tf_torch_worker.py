"""One process of a 2-process training run on 127.0.0.1 (for tests/training/test_multihost_tf_torch.py).

Usage: python multihost_tf_torch_worker.py RUN_DIR REPORT [--kill-at STEP] [--host-timeout S] [--cli] [--teacher PATH]
(KERAS_BACKEND, TF_CONFIG or torchrun's variables set by the caller). Trains the tiny digits
ViT of `FLAGS` with step checkpoints; `--kill-at` SIGKILLs this process after that step (as a
host lost mid-run); `--host-timeout` replaces its 20 s; `--cli` runs `keras-vit train` instead
of `train()`; `--teacher` distils (soft) from that `.keras` file. REPORT-<rank>.json gets the
run: per step, the logged loss and this process's own loss (from its local metric state).
The process dies (SIGALRM, not handled) after KERAS_VIT_TEST_LIMIT seconds, even when stuck
in a collective.
"""

import json
import os
import signal
import sys

FLAGS = {
    "image_size": 8, "patch_size": 4, "hidden_dim": 16, "depth": 1, "num_heads": 2, "mlp_dim": 32,
    "batch_size": 64, "steps": 16, "checkpoint_every": 5, "tensorboard": False, "verbose": 0, "host_timeout": 20,
}


def main(run_dir, report_path, kill_at=None, cli=False, host_timeout=None, teacher=None):
    if host_timeout is not None:
        FLAGS["host_timeout"] = host_timeout
    distill = {} if teacher is None else {"teacher": teacher, "distill": "soft"}
    strategy = "multi_worker" if os.environ["KERAS_BACKEND"] == "tensorflow" else "torch_ddp"
    if cli:
        from keras_vit.cli import main as keras_vit

        argv = ["train", "--output-dir", run_dir, "--strategy", strategy]
        for name, value in FLAGS.items():
            argv += ["--" + name.replace("_", "-"), str(value).lower()]
        for name, value in distill.items():
            argv += ["--" + name, value]
        return keras_vit(argv)

    import keras

    from keras_vit.training import train

    steps = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            tracker = self.model.metrics[0]  # the loss tracker: this process's total / count
            local = float(keras.ops.convert_to_numpy(tracker.total / tracker.count))
            steps.append([float(logs["loss"]), local])
            if kill_at is not None and len(steps) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    try:
        result = train("digits", output_dir=run_dir, strategy=strategy, callbacks=[Record()], **FLAGS, **distill)
    except ValueError as error:  # as the command line: one line, exit code 2
        print(f"error: {error}", file=sys.stderr)
        return 2
    weights = [keras.ops.convert_to_numpy(v).tolist() for v in result.model.weights[:2]]
    rank = os.environ.get("RANK") or json.loads(os.environ.get("TF_CONFIG", "{}"))["task"]["index"]
    with open(f"{report_path}-{rank}.json", "w") as handle:
        json.dump({"steps": steps, "resumed_from": result.resumed_from, "total": result.steps,
                   "weights": weights, "history": result.history}, handle)
    return 0


if __name__ == "__main__":
    signal.alarm(int(os.environ.get("KERAS_VIT_TEST_LIMIT", "240")))
    args = sys.argv[1:]
    kill = int(args[args.index("--kill-at") + 1]) if "--kill-at" in args else None
    timeout = float(args[args.index("--host-timeout") + 1]) if "--host-timeout" in args else None
    teacher = args[args.index("--teacher") + 1] if "--teacher" in args else None
    sys.exit(main(args[0], args[1], kill, "--cli" in args, timeout, teacher))
