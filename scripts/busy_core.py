"""The bench on an idle machine and with one core held by another process, side by side.

    python scripts/busy_core.py                                  # 4-shot word problems, n 8: ~5 minutes
    python scripts/busy_core.py --n 4 --bench-args "--compile off"

A free Space's CPU, a CI box and a laptop are shared: another process holding a core makes a decode's
thread team wait for it at every barrier. This runs `python -m evaluation bench --task words --shots 4
--policies none,entropy,dual` twice, once alone and once beside a spinning process (one core's worth of
busy work, bounded in time: it stops by itself after --max-seconds), and prints each policy's speedup
over the exact decoder in both runs and the share of its idle speedup it keeps. Run it alone on the
machine; the bench's own line says what load it saw.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def bench(n: int, extra: list[str], out: Path) -> list[dict]:
    """The bench's rows, from its --json."""
    cmd = [sys.executable, "-m", "evaluation", "bench", "--task", "words", "--shots", "4", "--n", str(n),
           "--policies", "none,entropy,dual", "--json", str(out), *extra]
    print("$", shlex.join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8, help="word problems per run (default 8)")
    ap.add_argument("--bench-args", default="", help="more bench flags for both runs, e.g. '--compile off'")
    ap.add_argument("--max-seconds", type=int, default=1800, help="the spinning process stops by itself after this")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be a positive integer, got {args.n}")
    if args.max_seconds < 1:
        ap.error(f"--max-seconds must be a positive integer, got {args.max_seconds}")
    extra = shlex.split(args.bench_args)
    with tempfile.TemporaryDirectory() as tmp:
        idle = bench(args.n, extra, Path(tmp) / "idle.json")
        spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=args.max_seconds)])
        try:
            busy = bench(args.n, extra, Path(tmp) / "busy.json")
        finally:
            spinner.kill()
            spinner.wait()
    print("\n| policy | speedup idle | speedup, one core busy | kept | agree idle / busy |")
    print("|---|---|---|---|---|")
    for a, b in zip(idle, busy):
        print(f"| {a['label']} | {a['speedup']:.2f}x | {b['speedup']:.2f}x | {b['speedup'] / a['speedup']:.0%} | "
              f"{a['agreement']:.3f} / {b['agreement']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
