"""Reading a trace back for a replay (app/race/replay.py): the app's own export (app/race/trace.py), read strictly,
since a visitor may upload anything. Size first, then JSON, then every field's type and range and the
events' consistency with each other (each value read as app/race/strict_json.py reads JSON); an error
names where it is (`lanes[1].events[7].confidences[0]`) and what was expected. No gradio here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields

from app.controls.declared import DECODE_CONTROLS, PEER_CONTROLS, RUN_CONTROLS, shown_policy
from app.controls.run import decoding_of
from app.race.strict_json import (
    kind_of,
    quoted,
    read_bool,
    read_int,
    read_ints,
    read_list,
    read_number,
    read_numbers,
    read_object,
    read_optional_number,
    read_text,
)
from app.race.trace import OLD_FORMATS, TRACE_FORMAT, TraceModel
from app.serving.budget import position_budget
from core.config import DecodeConfig
from core.events import StepEvent, Totals
from core.policies import POLICIES

MAX_TRACE_BYTES = 32 * 2**20  # a 512-token race on a long prompt writes ~5 MB
MAX_EVENTS = 4096  # per lane
MAX_LENGTH = 32768  # prompt + response positions
MAX_ID = 2**31 - 1
MAX_PIECES = 200_000
MAX_CHARS = 200  # one token's text
MAX_TEXT = 500_000  # a final text, a prompt
MAX_STEP_S = 3600.0
PEER_PARAMS = {control.param.name for control in PEER_CONTROLS.values()}
MAX_LAYERS = 256  # past every model the app serves (LLaDA-8B: 32, Dream-7B: 28)
MAX_WORK = position_budget("cuda")  # positions x steps over the lanes: the most a race the app runs may do
MAX_INT_DIGITS = len(str(2**63))  # the longest whole number a trace may spell out
SIDES = {2: ("left", "right"), 3: ("left", "middle", "right")}  # by the number of lanes
EVENT_FIELDS = [f.name for f in fields(StepEvent)]
PROBE_FIELDS = ("drift_cos", "drift_l2", "volatility", "kv_change")  # a race's events have none
TOTALS_FIELDS = [f.name for f in fields(Totals)]
# Fields a step's event and totals gained after this format was first written out: a trace from
# before them has none and reads as what they were then (pass times as not recorded).
LATER_FIELDS = {"capture_s": 0.0, "kv_change": None, "forward_s": None, "choice_s": None}


@dataclass(frozen=True)
class RecordedLane:
    side: str
    policy: str
    decoding: dict  # the lane's decode settings (core.config.DecodeConfig's declared fields)
    text: str
    finish_rank: int | None
    events: list[StepEvent]
    tau: float | None = None  # the entropy its policy decided by (None: a policy that decides by none)


@dataclass(frozen=True)
class Trace:
    settings: dict
    prompt_ids: list[int]
    speedup: float | None
    model: TraceModel
    lanes: tuple[RecordedLane, ...]  # left to right: two, or three with a middle lane
    floor_s: float | None = None  # the weight-read floor of the GPU it was recorded on


def read_trace(data: bytes) -> Trace:
    """A validated Trace from a trace file's bytes; ValueError with a plain message otherwise."""
    if len(data) > MAX_TRACE_BYTES:
        raise ValueError(f"The trace is {len(data) / 2**20:.1f} MB; a trace may be at most {MAX_TRACE_BYTES >> 20} MB.")
    try:
        raw = json.loads(data, parse_int=_json_int)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"The trace is not JSON: {str(e)[:200]}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"the trace: expected an object, got {kind_of(raw)}")
    fmt = raw.get("format")
    if fmt not in (TRACE_FORMAT, *OLD_FORMATS):
        raise ValueError(f"format: expected {TRACE_FORMAT!r} (a trace this app downloads), got {quoted(fmt)}")
    current = fmt == TRACE_FORMAT
    top = read_object(raw, "the trace", ("format", "model", "settings", "prompt_ids", "speedup", "lanes")
                      + (("weight_floor_s",) if current else ()))
    settings = _settings(top["settings"])
    prompt_ids = read_ints(top["prompt_ids"], "prompt_ids", MAX_LENGTH, 0, MAX_ID)
    if not prompt_ids or len(prompt_ids) + settings["gen_len"] > MAX_LENGTH:
        raise ValueError(f"prompt_ids: expected 1 to {MAX_LENGTH - settings['gen_len']} ids, got {len(prompt_ids)}")
    model = _model(top["model"])
    speedup = None if top["speedup"] is None else read_number(top["speedup"], "speedup", 0, 1e6)
    floor_s = top.get("weight_floor_s")
    floor_s = None if floor_s is None else read_number(floor_s, "weight_floor_s", 0, MAX_STEP_S)
    lanes = read_list(top["lanes"], "lanes", 3 if current else 2)
    if len(lanes) not in (SIDES if current else (2,)):
        allowed = " or ".join(f"{n} ({', '.join(sides)})" for n, sides in SIDES.items() if current or n == 2)
        raise ValueError(f"lanes: expected {allowed} lanes, got {len(lanes)}")
    shape = _Shape(len(prompt_ids), settings["gen_len"], model)
    run_decoding = None if current else _run_decoding(settings)
    sides = SIDES[len(lanes)]
    read = tuple(_lane(lane, f"lanes[{i}]", sides, i, shape, run_decoding, settings["tau"])
                 for i, lane in enumerate(lanes))
    work = sum((len(prompt_ids) + settings["gen_len"]) * len(lane.events) for lane in read)
    if work > MAX_WORK:  # what a replay draws, frame by frame, grows with it
        raise ValueError(f"The trace's race did {work:,} positions of work (positions x steps, over its lanes); "
                         f"a race the app runs does at most {MAX_WORK:,}.")
    return Trace(settings, prompt_ids, speedup, model, read, floor_s)


@dataclass(frozen=True)
class _Shape:
    prompt_len: int
    gen_len: int
    model: TraceModel

    @property
    def length(self) -> int:
        return self.prompt_len + self.gen_len


def _settings(raw: object) -> dict:
    defaults = {name: control.default for name, control in RUN_CONTROLS.items()}  # 0: an optional one unset
    s = read_object(_with_defaults(raw, defaults), "settings",
                    ("prompt", "model", "policy", *RUN_CONTROLS, "compared_params"))
    for name in ("prompt", "model", "policy"):
        read_text(s[name], f"settings.{name}", MAX_TEXT)
    s["policy"] = shown_policy(s["policy"])  # a trace written before the app named `none` vanilla reads alike
    for name, control in RUN_CONTROLS.items():  # as every run's controls are checked
        try:
            s[name] = control.check(s[name])
        except ValueError as e:
            raise ValueError(f"settings.{name}: {e}") from None
    compared = read_object(s["compared_params"], "settings.compared_params", (), optional=True)
    for name, value in compared.items():
        if name not in PEER_PARAMS:  # a name the message repeats: one the app declares, never the trace's own text
            raise ValueError(f"settings.compared_params: {quoted(name)} is no compared policy's parameter")
        read_number(value, f"settings.compared_params.{name}", -1e9, 1e9)
    return s


def _model(raw: object) -> TraceModel:
    m = read_object(raw, "model", ("mask_id", "eos_ids", "n_layers", "sep", "pieces"))
    pieces = read_object(m["pieces"], "model.pieces", (), optional=True)
    if len(pieces) > MAX_PIECES:
        raise ValueError(f"model.pieces: at most {MAX_PIECES} tokens, got {len(pieces)}")
    text = {}
    for key, piece in pieces.items():
        if not (key.isascii() and key.isdigit()) or int(key) > MAX_ID:
            raise ValueError(f"model.pieces: {quoted(key)} is not a token id")
        text[int(key)] = read_text(piece, f"model.pieces[{key}]", MAX_CHARS)
    eos = read_ints(m["eos_ids"], "model.eos_ids", 16, 0, MAX_ID)
    mask_id = read_int(m["mask_id"], "model.mask_id", 0, MAX_ID)
    n_layers = read_int(m["n_layers"], "model.n_layers", 1, MAX_LAYERS)
    sep = read_text(m["sep"], "model.sep", 1)
    if sep not in ("", " "):  # what TokenText joins tokens with, into the page as it is
        raise ValueError(f"model.sep: expected ' ' or '', got {quoted(sep)}")
    return TraceModel(mask_id, eos, n_layers, sep, text)


def _run_decoding(settings: dict) -> dict:
    """Every lane's decode settings in a trace of the first format: the run's controls, as a DecodeConfig
    checks them."""
    return _checked_decoding({key: control.setting(settings[key]) for key, control in DECODE_CONTROLS.items()},
                             "settings")


def _decoding(raw: object, where: str, gen_len: int) -> dict:
    """A lane's decode settings, as a DecodeConfig checks them, at the run's gen length."""
    defaults = {p.name: p.default for p in DecodeConfig.parameters}
    d = _checked_decoding(read_object(_with_defaults(raw, defaults), where, list(defaults)), where)
    if d["gen_len"] != gen_len:
        raise ValueError(f"{where}.gen_len: expected {gen_len} (settings.gen_len), got {d['gen_len']}")
    return d


def _checked_decoding(d: dict, where: str) -> dict:
    """Decode settings a DecodeConfig takes (every lane label reads its schedule from one)."""
    try:
        config = DecodeConfig(**d)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None
    return decoding_of(config)


def _lane(raw: object, where: str, sides: tuple[str, ...], index: int, shape: _Shape,
          run_decoding: dict | None, tau: float) -> RecordedLane:
    """Lane `index` of the trace's `sides`; `run_decoding`: its decode settings where the format records
    none per lane; `tau`: the run's (EntropyCache's), the lane's own if its policy decides by entropy."""
    side = sides[index]
    keys = ("side", "policy", "text", "compute_s", "finish_rank", "totals", "events")
    lane = read_object(raw, where, keys if run_decoding is not None else (*keys, "decoding"))
    if lane["side"] != side:
        raise ValueError(f"{where}.side: expected {side!r}, got {quoted(lane['side'])}")
    decoding = run_decoding if run_decoding is not None else _decoding(lane["decoding"], f"{where}.decoding",
                                                                       shape.gen_len)
    raw_events = read_list(lane["events"], f"{where}.events", MAX_EVENTS)
    if not raw_events:
        raise ValueError(f"{where}.events: a replay needs at least one step")
    events = [_event(e, f"{where}.events[{i}]", i, shape) for i, e in enumerate(raw_events)]
    if not events[-1].done or any(e.done for e in events[:-1]):
        raise ValueError(f"{where}.events: only the last step may be (and must be) the end of the decode")
    clock = read_number(lane["compute_s"], f"{where}.compute_s", 0, MAX_STEP_S * MAX_EVENTS)
    if not math.isclose(clock, sum(e.compute_s for e in events), rel_tol=1e-9, abs_tol=1e-12):
        raise ValueError(f"{where}.compute_s: {clock} is not the sum of its steps' compute_s")
    rank = lane["finish_rank"]
    if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= len(sides):
        raise ValueError(f"{where}.finish_rank: expected 1 to {len(sides)}, got {quoted(rank)}")
    policy = shown_policy(read_text(lane["policy"], f"{where}.policy", MAX_CHARS))
    return RecordedLane(side, policy, decoding, read_text(lane["text"], f"{where}.text", MAX_TEXT), rank, events,
                        tau if _decides_by_entropy(policy) else None)


def _decides_by_entropy(policy: str) -> bool:
    """Whether a recorded lane's policy, as it described itself (`entropy(tau=1.0, k=2)`: its registry name
    first), decides its full steps by entropy (CachePolicy.decides_by_entropy)."""
    declared = POLICIES.get(policy.split("(")[0])
    return declared is not None and declared.decides_by_entropy


def _event(raw: object, where: str, index: int, shape: _Shape) -> StepEvent:
    e = read_object(_with_later_fields(raw, EVENT_FIELDS), where, EVENT_FIELDS)
    for name in PROBE_FIELDS:
        if e[name] is not None:
            raise ValueError(f"{where}.{name}: a race's steps have none, got {quoted(e[name])}")
    if read_int(e["step"], f"{where}.step", 0, MAX_EVENTS) != index:
        raise ValueError(f"{where}.step: expected {index} (steps in order from 0), got {e['step']}")
    if read_int(e["prompt_len"], f"{where}.prompt_len", 0, MAX_LENGTH) != shape.prompt_len:
        raise ValueError(f"{where}.prompt_len: expected {shape.prompt_len} (the prompt's ids), got {e['prompt_len']}")
    tokens = _ids(e["tokens"], f"{where}.tokens", shape, shape.gen_len, allow_mask=True)
    if len(tokens) != shape.gen_len:
        raise ValueError(f"{where}.tokens: expected {shape.gen_len} (settings.gen_len), got {len(tokens)}")
    unmasked = _positions(e["unmasked"], f"{where}.unmasked", shape.prompt_len, shape.length)
    n = len(unmasked)
    out = dict(
        step=index,
        block=read_int(e["block"], f"{where}.block", 0, MAX_LENGTH),
        prompt_len=shape.prompt_len,
        tokens=tokens,
        unmasked=unmasked,
        unmasked_tokens=_ids(e["unmasked_tokens"], f"{where}.unmasked_tokens", shape, n),
        entropies=read_numbers(e["entropies"], f"{where}.entropies", n, 0, 100),
        confidences=read_numbers(e["confidences"], f"{where}.confidences", n, 0, 1),
        max_entropy=read_number(e["max_entropy"], f"{where}.max_entropy", 0, 100),
        full=read_bool(e["full"], f"{where}.full"),
        reason=read_text(e["reason"], f"{where}.reason", 2000),
        rows=_positions(e["rows"], f"{where}.rows", 0, shape.length),
        layer_rows=read_ints(e["layer_rows"], f"{where}.layer_rows", shape.model.n_layers, 0, shape.length),
        compute_s=read_number(e["compute_s"], f"{where}.compute_s", 0, MAX_STEP_S),
        forward_s=read_optional_number(e["forward_s"], f"{where}.forward_s", 0, MAX_STEP_S),
        choice_s=read_optional_number(e["choice_s"], f"{where}.choice_s", 0, MAX_STEP_S),
        decision_s=read_number(e["decision_s"], f"{where}.decision_s", 0, MAX_STEP_S),
        capture_s=read_number(e["capture_s"], f"{where}.capture_s", 0, MAX_STEP_S),
        totals=_totals(e["totals"], f"{where}.totals"),
        done=read_bool(e["done"], f"{where}.done"),
        block_done=read_bool(e["block_done"], f"{where}.block_done"),
    )
    for name in ("unmasked_tokens", "entropies", "confidences"):
        if len(out[name]) != n:
            raise ValueError(f"{where}.{name}: expected one per unmasked position ({n}), got {len(out[name])}")
    if len(out["layer_rows"]) != shape.model.n_layers:
        raise ValueError(f"{where}.layer_rows: expected one per layer ({shape.model.n_layers}), "
                         f"got {len(out['layer_rows'])}")
    return StepEvent(**out)


def _totals(raw: object, where: str) -> Totals:
    t = read_object(_with_later_fields(raw, TOTALS_FIELDS), where, (*TOTALS_FIELDS, "rows_fraction", "tokens_per_s"))
    return Totals(**{name: (read_number(t[name], f"{where}.{name}", 0, MAX_STEP_S * MAX_EVENTS) if name.endswith("_s")
                            else read_int(t[name], f"{where}.{name}", 0, MAX_ID)) for name in TOTALS_FIELDS})


def _ids(raw: object, where: str, shape: _Shape, max_len: int, allow_mask: bool = False) -> list[int]:
    """Token ids whose text the trace carries (or the mask id, where allowed)."""
    out = []
    for i, v in enumerate(read_list(raw, where, max_len)):
        token = read_int(v, f"{where}[{i}]", 0, MAX_ID)
        if token not in shape.model.pieces and not (allow_mask and token == shape.model.mask_id):
            raise ValueError(f"{where}[{i}]: token {token} has no text in model.pieces")
        out.append(token)
    return out


def _positions(raw: object, where: str, low: int, high: int) -> list[int]:
    """Distinct positions in [low, high)."""
    out = read_ints(raw, where, high - low, low, high - 1)
    if len(set(out)) != len(out):
        raise ValueError(f"{where}: a position appears twice")
    return out


def _json_int(digits: str) -> int:
    """A JSON integer, refused in our words when longer than any a trace holds (Python's own limit on
    reading one, 4300 digits, would answer in its words)."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"The trace has a whole number of {len(digits.lstrip('-'))} digits; a trace's numbers have "
                         f"at most {MAX_INT_DIGITS}.")
    return int(digits)


def _with_defaults(raw: object, defaults: dict) -> object:
    """`raw` with the declared settings it lacks at their defaults. A setting declared after a trace was
    written (top_p, top_k, alg, schedule, EntropyCache's scope) is not in it: that decode ran at its
    declared default. The declarations are read when a trace is, so a new one needs nothing here."""
    return {**defaults, **raw} if isinstance(raw, dict) else raw


def _with_later_fields(raw: object, names: list[str]) -> object:
    """`raw` with the LATER_FIELDS among `names` it lacks, at their value from before they were written."""
    later = {name: value for name, value in LATER_FIELDS.items() if name in names}
    return {**later, **raw} if isinstance(raw, dict) else raw


