"""Progress bars of the CLI: tqdm on stderr (stdout stays for results, so `--json -` is pure JSON).

Each long step gets its own bar (layers, chunks of text, points, steps) with a rate and an ETA;
`--quiet` turns every bar off. A bar appears only once its step has run DELAY_S seconds: quick steps,
and bad input refused at once, keep stderr to the one `error: ...` line. The core only calls plain
callbacks (`progress=`); the bars live here.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager

DELAY_S = 2.0


def quiet(args) -> bool:
    return bool(getattr(args, "quiet", False))


@contextmanager
def bar(args, desc: str, total: float | None = None, unit: str = "it"):
    """A tqdm bar on stderr (disabled with --quiet), closed on exit."""
    from tqdm import tqdm
    b = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=quiet(args), dynamic_ncols=True,
             mininterval=0.5, delay=DELAY_S, leave=True)
    try:
        yield b
    except BaseException:
        b.leave = False  # an error (or Ctrl-C): the bar is wiped, the error line stands alone
        raise
    finally:
        b.close()


def set_done(b, done: float, total: float | None = None) -> None:
    """Move a bar to `done` (of `total`, which may change once it is known)."""
    if total is not None and b.total != total:
        b.total = total
    b.update(done - b.n)


@contextmanager
def counted(args, desc: str, unit: str):
    """A callback progress(done, total) for the core's counters (layers, steps), drawn as a bar."""
    with bar(args, desc, unit=unit) as b:
        yield lambda done, total, *_: set_done(b, done, total)


@contextmanager
def fraction(args, desc: str):
    """A callback progress(fraction) for the core's fractional reports (perplexity windows), in percent."""
    with bar(args, desc, total=100, unit="%") as b:
        yield lambda f, *_: set_done(b, round(100 * min(max(float(f), 0.0), 1.0)))


def say(args, line: str) -> None:
    """A human line on stdout (not when --json - owns stdout) that does not tear a bar on the terminal."""
    if getattr(args, "json", None) == "-":
        return
    from tqdm import tqdm
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


def block_bar(args):
    """progress(done, total, bytes read, seconds) of a streamed model's passes: one bar per pass over its blocks,
    with the bytes read so far (tqdm adds the rate and the ETA)."""
    from tqdm import tqdm
    state = {"bar": None}

    def update(done: int, total: int, bytes_read: int, _seconds: float) -> None:
        b = state["bar"]
        if b is None or done < b.n:
            if b is not None:
                b.close()
            b = state["bar"] = tqdm(total=total, desc="streaming: blocks", unit="block", file=sys.stderr,
                                    disable=quiet(args), dynamic_ncols=True, mininterval=0.5, delay=DELAY_S)
        b.set_postfix_str(f"{bytes_read / 1e9:.2f} GB read", refresh=False)
        b.update(done - b.n)
        if done >= total:
            b.close()
            state["bar"] = None
    return update
