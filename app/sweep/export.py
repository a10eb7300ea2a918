"""A sweep to take home: its points and every text as CSV, everything as JSON, the prompts as a file,
and the command line that runs the same sweep (`python -m evaluation bench`, whose `--json` rows are these).

The CSV columns are the bench rows' own fields (a point's) and the per-prompt records' (a text's), in
their order, so a measure the bench adds appears here by itself. Files are written as every download
is (app/serving/downloads.py). No gradio here.
"""

from __future__ import annotations

import csv
import io
import json
import shlex
from pathlib import Path

from app.serving.downloads import DOWNLOAD_DIR, write_download
from app.sweep.decode import DECODING, OWN_PROMPTS, TASKS, SweepParams
from core.config import DecodeConfig
from core.params import value_text
from evaluation.cli.flags import BY_MODEL, FLAGS

SWEEP_FORMAT = "entropycache-sweep/1"
DECLARED = {p.name: p.default for p in DecodeConfig.parameters}  # a setting at its default needs no flag
SETTINGS = ("policy", "label", "tau", "k")  # the columns that say which point a line is
LEFT_OUT = {"params", "per_prompt", "tokens"}  # in the JSON; not one cell of a spreadsheet each


def cli_command(params: SweepParams, model: str | None, device: str) -> str:
    """The bench command that decodes the same sweep (your prompts from the prompts download, saved as
    prompts.txt). `model`: its --model (None: the embedded model, the default; a folder is not shown)."""
    c = params.config
    args = ["python", "-m", "evaluation", "bench"]
    if model is not None:
        args += ["--model", model, "--device", device]
    if params.task == OWN_PROMPTS:
        args += ["--prompts", "prompts.txt"]
    else:
        task, shots = TASKS[params.task]
        args += ["--task", task, "--n", str(params.problems)] + (["--shots", str(shots)] if shots else [])
    args += ["--policies", "none,entropy", "--tau", ",".join(repr(t) for t in params.taus),
             "--k", ",".join(str(k) for k in params.ks)]
    for name in DECODING:  # the lengths always (the bench's are the model's), the rest where not at its default
        value = getattr(c, name)
        if name in BY_MODEL or value != DECLARED[name]:
            args += [FLAGS.get(name, f"--{name.replace('_', '-')}"), flag_value(value)]
    args += ["--scope", params.scope] if params.scope != "block" else []
    args += ["--graphs", c.graphs] if c.graphs != "auto" else []
    return shlex.join(args + ["--json", "rows.json"])


def flag_value(value: int | float | str) -> str:
    """A setting's value as its flag takes it: as a person writes it (value_text), or in full where that
    would round it, so that the command decodes what the tab did."""
    text = value_text(value)
    return text if isinstance(value, str) or float(text) == value else repr(value)


def sweep_record(params: SweepParams, rows: list[dict], command: str) -> dict:
    """Everything as JSON: the settings, the command, the bench rows (each with its per-prompt records)."""
    settings = {"model": params.model, "task": params.task, "prompts": [p for _, p in params.prompts] or None,
                "problems": params.problems if params.task != OWN_PROMPTS else None, "taus": list(params.taus),
                "ks": list(params.ks), **{name: getattr(params.config, name) for name in DECODING},
                "scope": params.scope}
    return {"format": SWEEP_FORMAT, "settings": settings, "command": command, "rows": rows}


def points_csv(rows: list[dict]) -> str:
    """One line per bench row: which point, then every field of the row but the per-prompt records."""
    lines = [_settings(r) | _cells(r) for r in rows]
    return _csv(lines)


def texts_csv(rows: list[dict]) -> str:
    """One line per point and prompt: which point and prompt, then every field of its per-prompt record."""
    lines = [_settings(r) | {"prompt_index": i + 1} | _cells(p) for r in rows for i, p in enumerate(r["per_prompt"])]
    return _csv(lines)


def write_downloads(record: dict, folder: Path = DOWNLOAD_DIR) -> list[str]:
    """The sweep's files, written on the server: points CSV, texts CSV, JSON, and the prompts (own ones)."""
    rows = record["rows"]
    paths = [write_download(points_csv(rows), "sweep-points", ".csv", folder),
             write_download(texts_csv(rows), "sweep-texts", ".csv", folder),
             write_download(json.dumps(record), "sweep", ".json", folder)]
    if record["settings"]["prompts"]:
        paths.append(write_download("\n".join(record["settings"]["prompts"]) + "\n", "sweep-prompts", ".txt", folder))
    return [str(p) for p in paths]


def _settings(row: dict) -> dict:
    return {"policy": row["policy"], "label": row["label"], "tau": row["params"].get("tau"),
            "k": row["params"].get("k")}


def _cells(record: dict) -> dict:
    """A record's fields as cells: lists as space-separated values, None as empty."""
    return {key: " ".join(str(v) for v in value) if isinstance(value, list) else value
            for key, value in record.items() if key not in LEFT_OUT and key not in SETTINGS}


def _csv(lines: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(lines[0]) if lines else list(SETTINGS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    return out.getvalue()
