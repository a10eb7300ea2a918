"""The flags every command shares, each declared once: the model's (defined here), the decode settings'
(one per DecodeConfig.parameters) and the policy parameters' (one per declared core.Param of every
policy), and what they give once parsed: a generate's one value each, a bench's comma lists, each
checked against its declaration before the model loads."""

from __future__ import annotations

import argparse

import torch

from core.compiled import COMPILE_HELP, COMPILE_MODES, DEFAULT_COMPILE
from core.config import GRAPH_MODES, GRAPHS_HELP, DecodeConfig
from core.fusion import FUSION_HELP, FUSION_MODES
from core.loading import load_model
from core.params import Param, value_text
from core.policies import POLICIES
from core.refusal import check_choice


def declared_params() -> dict[str, Param]:
    """Every policy parameter by name. Policies that share a name share its flag (same type)."""
    out: dict[str, Param] = {}
    for cls in POLICIES.values():
        for p in cls.parameters:
            if p.name in out and out[p.name].kind is not p.kind:
                raise TypeError(f"policies declare parameter {p.name!r} with two types")
            out.setdefault(p.name, p)
    return out


def add_model_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default=None, help="checkpoint folder, hub id, 'llada', 'dream' (default: embedded)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--fusion", choices=FUSION_MODES, default=FUSION_MODES[0], help=FUSION_HELP)
    ap.add_argument("--compile", choices=COMPILE_MODES, default=DEFAULT_COMPILE, help=COMPILE_HELP)


BY_MODEL = ("gen_len", "block_len")  # the model's own unless given (DecodeConfig.for_model)

FLAGS = {"block_len": "--block"}  # a decode setting's flag, where it is not --name


def add_decode_args(ap: argparse.ArgumentParser) -> None:
    """One flag per declared decode setting (DecodeConfig.parameters). None defaults here: a setting
    not given is the model's (gen and block length) or DecodeConfig's."""
    for p in DecodeConfig.parameters:
        default = "the model's" if p.name in BY_MODEL else p.unset or value_text(p.default)
        ap.add_argument(FLAGS.get(p.name, f"--{p.name.replace('_', '-')}"), dest=p.name, type=p.kind, default=None,
                        choices=p.choices or None, help=f"{p.help} (default: {default})")
    ap.add_argument("--graphs", choices=GRAPH_MODES, default=GRAPH_MODES[0], help=GRAPHS_HELP)


def add_decoding_args(ap: argparse.ArgumentParser, lists: bool) -> None:
    """The flags of a command that decodes: the model's, the decode settings' and the policy
    parameters' (`lists`: each parameter a comma list, a sweep over every combination)."""
    add_model_args(ap)
    add_decode_args(ap)
    add_policy_args(ap, lists)


def add_policy_args(ap: argparse.ArgumentParser, lists: bool) -> None:
    """One flag per declared policy parameter (`--tau`, `--k`; a one-letter name also gets `-k`)."""
    for p in declared_params().values():
        users = ", ".join(name for name, cls in POLICIES.items() if p in cls.parameters)
        flags = [f"--{p.name.replace('_', '-')}"] + ([f"-{p.name}"] if len(p.name) == 1 else [])
        text = f"{p.help} ({users}; default {value_text(p.default)}{'; comma list for a sweep' if lists else ''})"
        ap.add_argument(*flags, dest=p.name, type=str if lists else p.kind, default=None,
                        choices=None if lists else p.choices or None, help=text)


def policy_params(name: str, args: argparse.Namespace) -> dict:
    """The values given on the command line for the parameters policy `name` declares; a flag of
    another policy's parameter is an error, not silently ignored."""
    given = {n: getattr(args, n) for n in declared_params() if getattr(args, n) is not None}
    refuse_unused(given, [name])
    return given


def refuse_unused(given: dict, policies: list[str]) -> None:
    for n in given:
        if not any(n in {p.name for p in POLICIES[name].parameters} for name in policies if name in POLICIES):
            owners = ", ".join(k for k, c in POLICIES.items() if n in {p.name for p in c.parameters})
            raise ValueError(f"--{n.replace('_', '-')} is a parameter of {owners}, not of {', '.join(policies)}")


def value_lists(args: argparse.Namespace) -> dict[str, list]:
    """The comma lists given for declared parameters, each value checked against its declaration."""
    out = {}
    for p in declared_params().values():
        text = getattr(args, p.name)
        if text is None:
            continue
        flag = f"--{p.name.replace('_', '-')}"
        if p.choices:  # names: each checked as it is written
            names = [v.strip() for v in text.split(",") if v.strip()]
            if not names:
                raise ValueError(f"{flag} must be a comma list of {', '.join(p.choices)}, got none in {text!r}")
            out[p.name] = [check_choice(v, p.choices, flag) for v in names]
            continue
        try:
            numbers = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"{flag} must be a comma list of numbers, got {text!r}") from None
        if not numbers:  # else the policy it belongs to would silently leave the bench
            raise ValueError(f"{flag} must be a comma list of numbers, got none in {text!r}")
        out[p.name] = [p.check(v) for v in numbers]
    return out


def decode_settings(args: argparse.Namespace) -> dict:
    """The decode settings given on the command line, checked before the model loads (an 8B one
    takes minutes): each against its declaration, and how they fit together when both lengths are
    given (else once the model's are known)."""
    settings = {p.name: p.check(getattr(args, p.name)) for p in DecodeConfig.parameters
                if getattr(args, p.name) is not None}
    if all(name in settings for name in BY_MODEL):
        DecodeConfig(**settings)
    return settings | {"graphs": args.graphs}


def int_list(text: str, flag: str, low: int) -> list[int]:
    """A flag's value: one integer or a comma list of them, each at least `low` (0 or 1)."""
    noun = "positive integer" if low == 1 else "non-negative integer"
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag} must be a {noun} or a comma list of them, got {text!r}") from None
    if min(counts) < low:
        raise ValueError(f"{flag} must be a {noun}, got {min(counts)}")
    return counts


def load_from_flags(args: argparse.Namespace):
    return load_model(args.model, device=args.device, dtype=getattr(torch, args.dtype) if args.dtype else None,
                      fusion=args.fusion, compile_mode=args.compile)
