"""The held-out word problems as an lm-evaluation-harness task folder, so that lm-eval grades our
decoder on the same prompts as `python -m evaluation bench --task words`.

    python -m evaluation lm-eval-task --out runs/lm-eval-task --n 40 --shots 4
    python -m evaluation lm-eval --model entropycache --model_args policy=entropy --include_path runs/lm-eval-task \
        --tasks wordproblems_4shot --num_fewshot 4 --apply_chat_template

The folder holds the problems (test.jsonl), the task's YAML and a one-line sampler module. The
prompt is the bench's: with k > 0, k worked examples 'question : ... answer : ...' then 'question :
...', all in one user turn (lm-eval's single-turn few-shot with --apply_chat_template); with k = 0
the question alone. Each problem carries its own worked examples, the ones the bench gives it,
and the sampler hands lm-eval exactly those. Grading is the bench's: the number after the last
'answer is' must equal the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

from lm_eval.api.samplers import ContextSampler

from evaluation.tasks import held_out

YAML = """\
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
fewshot_split: test
output_type: generate_until
doc_to_text: "{text}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: " answer : "
fewshot_delimiter: " "
fewshot_config:
  sampler: !function own_shots.OwnShots
  doc_to_target: "{{{{answer_text}}}}"
num_fewshot: {shots}
generation_kwargs:
  until: ["question :"]
  do_sample: false
filter_list:
  - name: final_number
    filter:
      - function: regex
        regex_pattern: "answer is (\\\\d+)"
        group_select: -1
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""


class OwnShots(ContextSampler):
    """Each problem's own worked examples (its `shots` field), as the bench builds its prompt."""

    def sample(self, n: int, eval_doc: dict | None = None, df=None, **kwargs) -> list[dict]:
        if n == 0:
            return []
        have = len(eval_doc["shots"]) if eval_doc else 0
        if n != have:
            raise ValueError(f"this task was written for {have}-shot prompts, but --num_fewshot is {n}: "
                             f"pass --num_fewshot {have}, or write the task again with --shots {n}")
        return eval_doc["shots"]


def task_name(shots: int) -> str:
    return f"wordproblems_{shots}shot"


def write_task(folder: str | Path, n: int, shots: int) -> str:
    """Write the first `n` held-out problems, asked `shots`-shot, as a task folder; returns the task's name."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{task_name(shots)}.jsonl"
    with data.open("w") as f:
        for item in held_out("words", n, shots):
            worked = [{"prompt": s.prompt, "answer": str(s.answer), "answer_text": s.answer_text} for s in item.shots]
            f.write(json.dumps({"prompt": item.reference.prompt, "answer": str(item.reference.answer),
                                "answer_text": item.reference.answer_text, "shots": worked}) + "\n")
    text = "question : {{prompt}}" if shots else "{{prompt}}"
    name = task_name(shots)
    (folder / f"{name}.yaml").write_text(YAML.format(name=name, data=json.dumps(str(data)), text=text, shots=shots))
    (folder / "own_shots.py").write_text("from evaluation.tasks.lm_eval_export import OwnShots  # noqa: F401\n")
    return name
