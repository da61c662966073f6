"""The engine's device side, all arrays and jit: ModelRunner and its step's inputs and
outputs, the paged KV cache, attention (the jnp reference and a kernel per backend),
sharding over the mesh, the served weights and their quantization, the compilation cache
and a multi-host group's replay of the leader's device work.
"""
