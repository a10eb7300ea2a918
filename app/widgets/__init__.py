"""What more than one tab draws with: the status banner, a response's text, the lane plots and their
style, a step told in words, and the render throttle. No gradio here."""
