"""Text that others wrote (a model's tokens, a policy's reason, anything in a shared trace), made inert
for Markdown and HTML alike: shown as the characters it is, never as markup.

HTML escaping alone leaves Markdown's syntax: a trace's `![](http://host/p.png)` would make every
viewer's browser fetch that address (a tracking pixel), `[a](http://host)` and a bare
`http://host` (an autolink) would render as links. So every ASCII punctuation mark becomes a numeric
character reference, which Markdown and HTML both show as that character and neither parses as
syntax. No gradio here.
"""

from __future__ import annotations

import re

PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")  # every ASCII punctuation mark


def inert(text: str) -> str:
    """`text` with every ASCII punctuation mark as a character reference (`[` -> `&#91;`)."""
    return PUNCTUATION.sub(lambda m: f"&#{ord(m.group())};", text)
