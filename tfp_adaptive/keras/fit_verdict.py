"""One verdict at the end of a `fit`: the regime numbers, the live reading and the members' reading, combined.

A `SampleCollector` reads a run three ways: the regime numbers of its
steps (`tfp_adaptive.diagnostics.regime`, which predict a bias), the
configurational temperature read live from the minibatch gradients of
every step (its monitor), and, given ``training_data``, the temperature
of its members with exact gradients in both forms. The last is the most
direct (no minibatch noise, and the Laplacian form sees the stiff
directions), the live reading next; the regime numbers only predict. So
the verdict is, in this order:

- ``'hot'`` or ``'cold'``: the members' reading, else the live one, is off
  ``τ`` beyond the tolerance;
- ``'outside the regime'``: the regime numbers were warned on, and no
  members' reading rules the bias out;
- ``'accurate'``: a reading confirms ``τ``, precisely enough to rule out
  a spread 10% off (`tfp_adaptive.diagnostics.temperature.imprecise`);
- ``'unsettled'``: a reading was still moving;
- ``'unread'``: too short to read, too imprecise, or nothing read.
"""

import collections

from tfp_adaptive.diagnostics import temperature as temperature_lib

__all__ = ['FitVerdict', 'VERDICTS', 'combine']

VERDICTS = ('hot', 'cold', 'outside the regime', 'accurate', 'unsettled',
            'unread')

FitVerdict = collections.namedtuple('FitVerdict', [
    'verdict', 'regime', 'live', 'members'])
FitVerdict.__doc__ = """The end of a `fit`, read three ways and combined.

Fields: ``verdict`` (one of `VERDICTS`), ``regime`` (``'outside'``,
``'inside'`` or `None` when not checked), ``live`` and ``members`` (each
`tfp_adaptive.diagnostics.temperature.final_verdict`'s word, or
``'too imprecise'`` for a whole-model reading within the band whose
interval is too wide to vouch for it, or `None` when not read; the
members' combines both forms, the off one first).
"""


def combine(regime, live, members, temperature,
            tolerance=temperature_lib.TOLERANCE):
  """The `FitVerdict` of a run.

  Args:
    regime: the run's `RegimeState`, or `None`.
    live: the monitor's `Reading` of the whole model, or `None`.
    members: the members' readings (``'overall'`` and ``'laplacian'``), or
      `None`.
    temperature: ``τ``.
    tolerance: relative tolerance on the temperature.
  """
  def judge(reading):
    if reading is None:
      return None
    word = temperature_lib.final_verdict(reading, temperature, tolerance)
    if word == 'accurate' and temperature_lib.imprecise(reading, temperature,
                                                        tolerance):
      return 'too imprecise'
    return word
  regime_word = (None if regime is None or not regime.checked else
                 'outside' if regime.outside else 'inside')
  live_word = judge(live)
  members_word = None
  if members is not None:
    words = [judge(members[key]) for key in ('overall', 'laplacian')
             if members.get(key) is not None]
    members_word = next((w for w in ('hot', 'cold', 'unsettled', 'too short',
                                     'too imprecise')
                         if w in words), 'accurate' if words else None)
  for word in (members_word, live_word):
    if word in ('hot', 'cold'):
      return FitVerdict(word, regime_word, live_word, members_word)
  if regime_word == 'outside' and members_word != 'accurate':
    verdict = 'outside the regime'
  elif 'accurate' in (members_word, live_word):
    verdict = 'accurate'
  elif 'unsettled' in (members_word, live_word):
    verdict = 'unsettled'
  else:
    verdict = 'unread'
  return FitVerdict(verdict, regime_word, live_word, members_word)
