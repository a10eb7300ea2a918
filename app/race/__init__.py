"""The Race tab: the race itself (decode.py), its renderer (render.py, speed.py), the tab (tab.py), the
downloadable trace (trace.py, read back strictly by trace_reader.py) and the replay of one (replay.py,
replay_panel.py)."""
