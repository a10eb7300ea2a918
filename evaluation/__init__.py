"""Evaluation of the decoder library: what uses `core` to measure it, and the command line.

    python -m evaluation bench --policies none,entropy --tau 0.5,1,2 --n 40

bench.py decodes held-out items under each contender and scores them; diagnostics.py measures the
cache's drift; forward_cost.py times one forward by rows computed; the lm_eval_*.py modules run
lm-evaluation-harness on the decoder; tasks/ holds the embedded model's tasks
(word problems, stories); cli/ is the command line over the decoder and all of these.

Evaluation depends on the decoder library; the decoder library never depends on evaluation, so
serving a model needs none of this package. The app, the scripts and training may use it.
"""
