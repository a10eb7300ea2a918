"""Serving the tabs: the shared context, a tab's run (the runner, and the panel tab the Race and Drift
run as), one run per session, the turn queue, the CPU decoding thread, ZeroGPU plumbing, the model
registry and the check of a client's choice. What a run decodes or shows is the features' (app/race,
app/drift, app/sweep), and what a visitor may ask for the controls' (app/controls), which import this
package and never the other way round."""
