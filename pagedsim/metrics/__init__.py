"""The metrics layer: what a run records, and the numbers made from the record.

Data flows one way, workload -> scheduler -> memory manager -> metrics -> plots: the
engine (:mod:`pagedsim.engine`) feeds this layer as a run goes, and the experiments,
plots and command line read what it made; nothing here imports the engine. In the order
a run fills them:

- :mod:`~pagedsim.metrics.step_stats`: the per-step sums a summary needs, kept as the run
  goes (so that no per-step row has to be kept);
- :mod:`~pagedsim.metrics.step_keep`: which per-step rows are kept (all, none, a
  sample, one per span of simulated time);
- :mod:`~pagedsim.metrics.token_gaps`: the inter-token latencies of every request;
- :mod:`~pagedsim.metrics.request_log`: one compact row per request, written when it
  finishes or is rejected;
- :mod:`~pagedsim.metrics.host_stats`: a host tier's copies, occupancy and numbers;
- :mod:`~pagedsim.metrics.sim_result`: :class:`SimResult`, the run's record, and the
  names of a per-step row's fields (``STEP_COLUMNS``);

then, from a finished record:

- :mod:`~pagedsim.metrics.summary`: one flat dict of numbers per run (shares of the
  pool, batch sizes, throughput, latencies), and pandas frames of several;
- :mod:`~pagedsim.metrics.serving_report`: the fields and printed block of vLLM's
  ``benchmark_serving`` for a simulated run.
"""
