"""The soak behind `python tools/soak.py`: its load (run.py), its requests (requests.py) and
its checks of the server's /metrics (report.py)."""
