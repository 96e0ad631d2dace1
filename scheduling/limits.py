"""Bounds of a job submission, shared by the form, the API serializer and the service."""

NAME_MAX = 100
GPUS_MAX = 10_000  # also bounded by the cluster's size at submit time
GPUS_PER_NODE_MAX = 8
GPU_MEMORY_GB_MAX = 1024
MAX_RETRIES_MAX = 10
CHECKPOINT_INTERVAL_MAX = 7 * 24 * 60
RUNTIME_MAX_MINUTES = 90 * 24 * 60
MODEL_NAME_MAX = 100
CHECKPOINT_PATH_MAX = 500
SHARED_STORAGE_SCHEMES = ("nfs", "s3", "gs", "hdfs", "lustre", "cephfs", "abfs", "oss", "gpfs")
AFTER_MAX = 20  # jobs one job may wait for (``after``)
AFTER_ARRAYS_MAX = 20  # arrays one job may wait for as a whole (``after_arrays``)
SINGLETON_MAX = 200  # older active jobs of one name a ``singleton`` job may wait for
JOB_ID_MAX = 2**63 - 1  # a job id is a bigint: a larger number names no job
