"""The Drift tab: the probed decode (decode.py), its renderer (render.py, plots.py) and the tab (tab.py)."""
