"""Checkpoint loaders: where a model lives, and (in later modules) its weights as a pytree."""
