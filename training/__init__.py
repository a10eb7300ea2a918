"""Training the project's own diffusion LM: the trainer, its batches, the word-level tokenizer, and
saving a model in the layout `core.loading.load_model` reads.

    python -m training train --out runs/my-model --minutes 30

Training depends on the decoder library (`core`: the model, loading) and on evaluation's tasks
(`evaluation.tasks`: what the model is trained on); neither depends on training, so serving or
measuring a model needs none of this package.
"""
