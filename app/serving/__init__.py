"""Serving the tabs: the shared context, a tab's run (the runner), one run per session, the turn queue,
the CPU decoding thread, ZeroGPU plumbing and the model registry. What a run decodes or shows is the
features' (app/race, app/drift, app/sweep)."""
