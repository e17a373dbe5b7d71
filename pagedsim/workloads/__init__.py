"""Workloads: synthetic loads (ShareGPT-like, Alpaca-like, prefix-sharing ones),
real traces (Azure, Mooncake, our CSV/JSONL) and the content that names
their blocks. The first layer of the data flow: requests for the engine."""
