"""gpugate: policy-as-code for GPU batch workloads on Kubernetes."""

__version__ = "0.1.0"
