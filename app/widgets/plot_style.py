"""What every figure of the app shares: its colours for the same things, and its margins."""

FULL_COLOR = "#d62728"  # a full recompute
LINE_COLOR = "#1f77b4"
TAU_COLOR = "#ff7f0e"  # EntropyCache's threshold
MARGIN = dict(l=50, r=20, t=40, b=40)
