"""LoRA adapters served by name: the registry of loaded adapters and its routes."""
