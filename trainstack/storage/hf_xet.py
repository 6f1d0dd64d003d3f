"""hf_xet's memory bounds for the processes that move checkpoints and model weights (the launcher's Hub
sync and restore, `trainstack inputs prepare`).

hf_xet sizes its buffers for throughput: it ingests up to 8 files at once, lets 64 xorbs (64 MiB each)
be in flight, and prefetches up to 2 GiB plus 512 MiB per file when downloading. Against a fast endpoint
a 2 GiB checkpoint push then peaked at 1.4 GiB RSS and a 2 GiB file download at 1.1 GiB, growing with
the checkpoint; with these values both stay near 300-500 MiB at 2-4 GiB with the same throughput
(benchmarks/hub_push.py, docs/benchmarks.md). They are defaults: a value already in the environment
wins. hf_xet reads them when its session starts (on the process's first Xet transfer), and the
processes this process starts inherit them.
"""
from __future__ import annotations

import os

XET_BOUNDS = {
    "HF_XET_DATA_MAX_CONCURRENT_FILE_INGESTION": "1",
    "HF_XET_CLIENT_AC_MAX_UPLOAD_CONCURRENCY": "4",
    "HF_XET_CLIENT_AC_MAX_DOWNLOAD_CONCURRENCY": "4",
    "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_SIZE": "128mb",
    "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_PERFILE_SIZE": "64mb",
    "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_LIMIT": "256mb",
    "HF_XET_RECONSTRUCTION_MIN_PREFETCH_BUFFER": "64mb",
    "HF_XET_RECONSTRUCTION_MIN_RECONSTRUCTION_FETCH_SIZE": "64mb",
}


def bound_xet_memory() -> None:
    """Set the bounds this process has no value for."""
    for key, value in XET_BOUNDS.items():
        os.environ.setdefault(key, value)
