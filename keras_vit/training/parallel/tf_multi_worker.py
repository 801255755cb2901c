"""TensorFlow's `MultiWorkerMirroredStrategy` (hosts from `TF_CONFIG`): where this worker
stands in the cluster and how its own input pipeline reaches its replicas.

Each worker builds the training stream of one process, keeps only its part of every global
batch (`pipeline.train_dataset(part=...)`), and hands it to `fit` as a distributed dataset
made from that per-worker pipeline (`distribute_datasets_from_function`), so TensorFlow
neither reads the whole dataset on every worker nor splits the batches again.
"""

import tensorflow as tf


def worker_position(strategy):
    """`(workers, index)` of this process in the cluster: the chief (if any) is 0."""
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec()
    jobs = spec.jobs
    workers = sum(spec.num_tasks(job) for job in ("chief", "worker") if job in jobs)
    if resolver.task_type == "chief":
        return workers, 0
    return workers, resolver.task_id + ("chief" in jobs)


def feeder(strategy):
    """`feed(dataset)`: this worker's batches (of `global / workers`) split over its local
    replicas, as a distributed dataset `fit` uses as it is."""
    workers, index = worker_position(strategy)
    local_replicas = strategy.num_replicas_in_sync // workers

    def feed(dataset):
        def per_worker(context):
            if (context.num_input_pipelines, context.input_pipeline_id) != (workers, index):
                raise RuntimeError(
                    f"TensorFlow placed this worker's input at {context.input_pipeline_id} of "
                    f"{context.num_input_pipelines}, not at {index} of {workers}."
                )
            if local_replicas == 1:
                return dataset
            return dataset.rebatch(dataset.element_spec[0].shape[0] // local_replicas)

        return strategy.distribute_datasets_from_function(per_worker)

    return feed


def gatherer(strategy):
    """`gather(values)`: a list of ints from every worker, worker by worker (a collective)."""
    workers, _ = worker_position(strategy)
    local_replicas = strategy.num_replicas_in_sync // workers

    def gather(values):
        row = tf.constant([list(values)], tf.int64)

        @tf.function
        def all_rows():
            return tf.distribute.get_replica_context().all_gather(row, axis=0)

        rows = strategy.experimental_local_results(strategy.run(all_rows))[0].numpy()
        return rows[::local_replicas].tolist()

    return gather
