"""The dispatch-ahead loop skeleton that train and evaluate share.

Loop k+1 is dispatched before loop k's results are read (when the call may work ahead),
so the devices work while the host handles loop k (its loss, host functions, hooks).
The bookkeeping that keeps this invisible to hooks lives here, once:

- hooks see each loop in order: ``before_run`` of loop k+1 follows ``after_run`` of
  loop k, even though loop k+1 was dispatched earlier;
- an error reading loop k+1's input is raised only once loop k is accounted for (its
  hooks, logs and checkpoints have seen it);
- a stop requested at loop k drops loop k+1's results, so every hook, log and
  checkpoint sees exactly the steps that count;
- donation: a loop dispatched ahead says whether it took loop k's state
  (``InFlight.took_previous``; training's loop ahead takes it only where no hook reads
  it or can stop there). ``account`` is told so (the hooks then see ``session.state``
  None), and a stop at loop k (a SIGTERM) accounts for that loop too instead of
  dropping it, since loop k's state no longer exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class InFlight(NamedTuple):
    """One dispatched loop.

    Attributes:
      first: the steps before it (in TRAIN, its first global step).
      steps: its step count.
      out: what the compiled loop returned (a TrainLoopOut or EvalLoopOut, still being
        computed on the devices).
      took_previous: the dispatch took (donated) the state of the loop before it, so
        that loop's output state no longer exists.
    """

    first: int
    steps: int
    out: Any
    took_previous: bool = False


#: What a dispatch ahead returns when the loop after ``previous`` must not start before
#: ``previous`` is accounted for (its state is still needed: see ``donated_state``).
NOT_AHEAD: Any = object()

# ``dispatch(previous, before_run)``: read the next loop's input and dispatch it after
# ``previous`` (None for the first loop; the one whose outputs it may start from), calling
# ``before_run`` (when not None) between reading and dispatching. None: no more input;
# NOT_AHEAD (only when ``before_run`` is None, i.e. ahead): not now (an input read for
# it stays with the dispatcher, for its next call).
Dispatch = Callable[[InFlight | None, Callable[[], None] | None], Any]
# ``account(loop, state_taken)``: handle a loop's results (hooks' after_run included);
# ``state_taken``: the loop dispatched ahead took its output state. True to stop.
Account = Callable[[InFlight, bool], bool]


def run_pipelined(
    dispatch: Dispatch,
    account: Account,
    before_run: Callable[[], None],
    pipelined: bool,
) -> None:
    """Run loops until the input ends or ``account`` asks to stop.

    Args:
      dispatch: reads the next loop's input and dispatches it (see ``Dispatch``).
      account: handles one loop's results, in order (see ``Account``); returns True to
        stop.
      before_run: the hooks' ``before_run`` for the next loop.
      pipelined: dispatch loop k+1 before accounting for loop k (where ``dispatch``
        does not answer NOT_AHEAD).

    Raises:
      Whatever ``dispatch`` or ``account`` raise; an error of the dispatch ahead only
      after the loop before it is accounted for, and never after a stop.
    """
    current = dispatch(None, before_run)
    while current is not None:
        ahead, deferred = None, None
        if pipelined:
            try:
                ahead = dispatch(current, None)  # its before_run follows this loop's after_run
            except Exception as err:  # input_fn's error: raised once this loop is accounted for
                deferred = err
        took = ahead if isinstance(ahead, InFlight) and ahead.took_previous else None
        if account(current, took is not None):
            if took is not None:  # loop k's state is gone: the loop ahead's steps count
                before_run()
                account(took, False)
            return  # otherwise a loop dispatched ahead is dropped
        if deferred is not None:
            raise deferred
        if not pipelined or ahead is NOT_AHEAD:
            current = dispatch(current, before_run)
        elif ahead is not None:
            before_run()
            current = ahead
        else:
            current = None
