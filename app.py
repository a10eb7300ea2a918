"""Start the EntropyCache demo: python app.py [--host H] [--port P] [--model DIR ...] [--share] [--graphs MODE]
[--fusion MODE].

It serves the embedded model on the CPU, and LLaDA-8B-Instruct / Dream-7B-Instruct on a GPU when
one is present. Extra local checkpoint folders come from --model or ENTROPYCACHE_MODELS (os.pathsep
separated); visitors only pick from that list.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys

import torch

from app.serving.device_thread import CPU_THREAD, decode_threads
from app.serving.gpu import CONCURRENCY, is_zero_gpu
from app.serving.registry import build_registry, extra_dirs_from_env
from app.ui import build_demo, launch
from core.compiled import COMPILE_HELP, COMPILE_MODES, DEFAULT_COMPILE
from core.config import GRAPH_MODES, GRAPHS_HELP
from core.device import usable_cpus
from core.fusion import FUSION_HELP, FUSION_MODES


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    ap.add_argument("--model", action="append", default=[], metavar="DIR",
                    help="an extra local checkpoint folder to offer (repeatable)")
    ap.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY,
                    help="runs admitted at once; they decode one at a time per device, in turn")
    ap.add_argument("--threads", type=int, default=decode_threads(),
                    help="CPU threads a decode uses (default: every core but one, which the server keeps)")
    ap.add_argument("--graphs", choices=GRAPH_MODES, default=GRAPH_MODES[0],
                    help=GRAPHS_HELP + "; every lane of every race alike")
    ap.add_argument("--fusion", choices=FUSION_MODES, default=FUSION_MODES[0],
                    help=FUSION_HELP + "; off on ZeroGPU, which does not support torch.compile")
    ap.add_argument("--compile", choices=COMPILE_MODES, default=DEFAULT_COMPILE,
                    help=COMPILE_HELP + "; compiled while the model warms up")
    return ap.parse_args(argv)


def check_port(host: str, port: int) -> None:
    """A ValueError naming --port (or --host) unless this process can serve there: checked before the model
    loads, not by Gradio's traceback after it."""
    if not 1 <= port <= 65535:
        raise ValueError(f"--port must be from 1 to 65535, got {port}")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, port))
    except (OSError, OverflowError) as e:
        raise ValueError(f"cannot serve on --host {host} --port {port} ({e.strerror or e}): pick another port, "
                         "or stop what holds it") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.concurrency < 1:
        print(f"error: --concurrency must be a positive integer, got {args.concurrency}", file=sys.stderr)
        return 2
    try:
        check_port(args.host, args.port)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cores = usable_cpus()
    if not 1 <= args.threads <= cores:
        print(f"error: --threads must be from 1 to {cores} (the CPUs this process may use), got {args.threads}",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)  # the main thread's OpenMP team: every CPU decode runs on it
    # ZeroGPU loads every model at startup and lends each run a whole GPU slice: keep them all resident.
    max_gpu_models = 8 if is_zero_gpu() else 1
    try:
        registry = build_registry([*args.model, *extra_dirs_from_env()], max_gpu_models=max_gpu_models,
                                  graphs=args.graphs, fusion="off" if is_zero_gpu() else args.fusion,
                                  compile_mode=args.compile)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # The embedded model is small: load it now, so the first visitor does not wait. On ZeroGPU every
    # model must be loaded at startup, outside the GPU function (weights then follow it onto the GPU).
    registry.preload(None if is_zero_gpu() else registry.labels[:1])
    demo = build_demo(registry, concurrency=args.concurrency)
    try:
        url = launch(demo, args.host, args.port, args.share)
    except OSError as e:  # taken since check_port looked
        print(f"error: cannot serve on --host {args.host} --port {args.port}: {e}", file=sys.stderr)
        return 2
    # What exists now lives as long as the server: frozen out of the garbage collector, so that a full
    # collection (after every run, app/serving/gpu.py free_memory, or an automatic one) walks only what
    # runs created. Walking the startup objects too holds the interpreter lock long enough to land inside
    # a race's turn, on its clock's steps or before the next visitor's.
    gc.freeze()
    print(f"EntropyCache demo running at {url}", flush=True)
    if demo.share_url:
        print(f"public link: {demo.share_url}", flush=True)
    # Instead of demo.block_thread(), the main thread runs every CPU load and decode step until the
    # server stops (app/serving/device_thread.py says why); Ctrl-C closes the server as block_thread would.
    try:
        CPU_THREAD.serve(until=lambda: not demo.is_running)
    except (KeyboardInterrupt, OSError):
        print("Keyboard interruption in main thread... closing server.", flush=True)
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
