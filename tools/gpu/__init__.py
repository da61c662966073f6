"""The GPU checks that tools/gpu_check.sh runs on a lent H100 or H200, each as
`python -m tools.gpu.NAME` from the repository root."""
