"""`to_arviz`: chains of `tfp.mcmc.sample_chain` over our kernels as `arviz.InferenceData`.

ArviZ computes R-hat, the effective sample size, trace and rank plots and
PSIS-LOO; this module only lays our arrays out as ArviZ expects them
(``[chain, draw, ...]``). ArviZ is an optional dependency:
``pip install 'tfp_adaptive[diagnostics]'``.
"""

import importlib

import numpy as np

__all__ = ['import_arviz', 'to_arviz']

# Kernel-results fields that become sample statistics, with ArviZ's names
# where ArviZ has one.
_STATS = {'target_log_prob': 'lp', 'step_size': 'step_size'}
# Statistics the kernels hold once for all chains (``[draws]``), repeated
# for each chain.
_SHARED = ('step_size',)


def import_arviz():
  """`arviz`, or an `ImportError` saying how to install it."""
  try:
    return importlib.import_module('arviz')
  except ImportError:
    raise ImportError(
        'This needs ArviZ: pip install \'tfp_adaptive[diagnostics]\' (or pip '
        'install arviz).') from None


def to_arviz(samples, trace=None, chain_axis=1, names=None, **kwargs):
  """Posterior draws (and per-step statistics) as `arviz.InferenceData`.

  Args:
    samples: what `tfp.mcmc.sample_chain` (or `tfp_adaptive.mcmc.sample`)
      returns as states: a Tensor, a list/tuple of parts or a dict of
      named parts. Each part is laid out as TFP lays it out: draws first,
      then the chains (the state's leading batch axis), then the event.
    trace: optional per-step statistics: a dict, a namedtuple (e.g.
      `AdaptiveSGMCMCKernelResults` returned by a ``trace_fn``), or a
      structure of them; leaves shaped ``[draws, chains, ...]`` (or
      ``[draws, ...]`` without chains) become ``sample_stats``. The kernel
      results' ``target_log_prob`` is named ``lp``, as ArviZ expects, and
      ``step_size``, ``gamma_norm``, ``num_nonfinite``, ``num_unmoved``
      keep their names; fields that are not per-chain statistics (the
      metric state) are left out.
    chain_axis: ``1`` (TFP's layout, ``[draws, chains, ...]``), ``0``
      (``[chains, draws, ...]``) or `None` (one chain, ``[draws, ...]``).
    names: names of a list of parts (default ``x0, x1, ...``); ignored for
      dicts.
    **kwargs: passed to `arviz.from_dict` (e.g. ``coords``, ``dims``).

  Returns:
    `arviz.InferenceData` with a ``posterior`` group (and ``sample_stats``).

  Example:
    >>> samples, trace, _ = tfa.mcmc.sample(kernel, state, 1000,
    ...                                     trace_fn=lambda _, r: r)
    >>> az.summary(tfa.to_arviz(samples, trace))    # R-hat, ESS
  """
  az = import_arviz()
  if chain_axis not in (0, 1, None):
    raise ValueError('`chain_axis` must be 0, 1 or None. Received: '
                     'chain_axis=%r' % (chain_axis,))
  posterior = {name: _chain_first(value, chain_axis, name)
               for name, value in _named_parts(samples, names).items()}
  shape = next(iter(posterior.values())).shape[:2]
  stats = {}
  for name, value in _trace_fields(trace).items():
    if chain_axis is not None and name in _SHARED and np.ndim(value) == 1:
      value = np.repeat(np.asarray(value)[:, None], shape[0], axis=1)
      value = value if chain_axis == 1 else value.T
    if chain_axis is not None and np.ndim(value) < 2:
      continue  # Not a per-draw, per-chain statistic (e.g. the step count).
    value = _chain_first(value, chain_axis, name)
    if value.shape[:2] == shape:
      stats[name] = value
  return az.from_dict(posterior=posterior, sample_stats=stats or None,
                      **kwargs)


def _named_parts(samples, names):
  if isinstance(samples, dict):
    return {str(k): v for k, v in samples.items()}
  if hasattr(samples, '_asdict'):
    return dict(samples._asdict())
  parts = list(samples) if isinstance(samples, (list, tuple)) else [samples]
  if names is None:
    names = ['x%d' % i for i in range(len(parts))] if len(parts) > 1 else ['x']
  if len(names) != len(parts):
    raise ValueError('`names` must name each of the %d state parts. '
                     'Received: names=%r' % (len(parts), names))
  return dict(zip(names, parts))


def _trace_fields(trace):
  """Flat ``{name: array}`` of a trace's per-step fields."""
  if trace is None:
    return {}
  if isinstance(trace, dict):
    items = trace.items()
  elif hasattr(trace, '_asdict'):
    items = trace._asdict().items()
  elif isinstance(trace, (list, tuple)):
    out = {}
    for t in trace:
      out.update(_trace_fields(t))
    return out
  else:
    return {'stat': trace}
  out = {}
  for name, value in items:
    if hasattr(value, '_asdict') or isinstance(value, dict):
      out.update(_trace_fields(value))
    elif hasattr(value, 'shape') and hasattr(value, 'dtype'):
      out[_STATS.get(name, name)] = value
  return out


def _chain_first(value, chain_axis, name):
  a = np.asarray(value)
  if chain_axis is None:
    return a[None]
  if a.ndim < 2:
    raise ValueError('%r has shape %s: with chain_axis=%d it needs a draw and '
                     'a chain axis; pass chain_axis=None for one chain.'
                     % (name, a.shape, chain_axis))
  return np.swapaxes(a, 0, 1) if chain_axis == 1 else a
