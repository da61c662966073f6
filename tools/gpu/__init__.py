"""The GPU checks of tools/gpu_check.sh, which runs its steps (parity, serve, bench, report) as
`python -m tools.gpu.NAME` from the repository root; the other modules are their parts."""
