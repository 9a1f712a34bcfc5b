"""Scale tools: multi-host slices and the memory planner.

  distributed  multi-host initialization, process data exchange, global batches
  multihost    what a slice samples and updates with when it spans several processes
  writers      what process 0 alone writes: console lines and the slice's metrics
  planner      the `--dry_run` memory plan of each agent on its mesh
"""
