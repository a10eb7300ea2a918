"""The Sweep tab: a tau x k sweep checked and decoded (decode.py), its renderer (render.py), its panels
(panels.py) and the tab's handlers (tab.py)."""
