"""The benchmarks behind `python tools/bench.py` (cli.py), the servers they start (llama-server:
llama_server.py; either server's process: server_process.py) and their reports."""
