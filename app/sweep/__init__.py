"""The Sweep tab: a tau x k sweep checked and decoded (decode.py), its renderer (render.py) and the tab (tab.py)."""
