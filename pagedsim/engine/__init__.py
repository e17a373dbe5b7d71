"""The engine: continuous batching (the scheduler, its configuration, waiting
order and rejection reasons), the step plan, the simulator that executes it and
the cost model that times it. It drives the memory manager (pagedsim.memory) and
feeds what a run records to the metrics layer (pagedsim.metrics)."""
