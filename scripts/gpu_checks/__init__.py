"""The GPU check's parts (scripts/gpu_check.py runs them): the shapes and settings, one module per check
(attention, forward, end_to_end, equality, syncs), what they replay (replayed), the embedded model's
bench, the app's race on a LLaDA-shaped folder, the card's peak and the report."""
