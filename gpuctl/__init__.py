"""gpuctl: the command-line client of the GPU portal (speaks only its REST API)."""

__version__ = "0.1.0"
