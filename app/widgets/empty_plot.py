"""A figure not drawn yet: blank, at the height the drawn one will have, saying in its middle what will
appear there and when, so that no panel sits on the page as an empty box. No gradio here.
"""

from __future__ import annotations

import plotly.graph_objects as go

from app.widgets.plot_style import MARGIN

PLACEHOLDER_COLOR = "#666"


def empty_figure(title: str, says: str, height: int) -> go.Figure:
    """`title` above a blank plot of `height` px, `says` in its middle (what will be drawn, and when)."""
    fig = go.Figure()
    fig.add_annotation(text=says, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font=dict(size=12, color=PLACEHOLDER_COLOR))
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=height, margin=MARGIN,
                      template="plotly_white", xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig
