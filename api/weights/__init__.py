"""New weights, sleep and wake for training loops: vLLM's route names over engine/residency.py."""
