"""The Gradio demo: two decoders race on one prompt, EntropyCache against a compared cache policy.

Presentation only. `core` decodes and yields events; this package interleaves, renders and serves them.
"""
