"""Figures for the diagnostics: the temperature per layer over epochs, and a reliability diagram.

Matplotlib is an optional dependency: ``pip install
'tfp_adaptive[diagnostics]'``. ArviZ draws traces and rank plots of chains
(`tfp_adaptive.to_arviz`, then ``az.plot_trace``).
"""

import importlib

import numpy as np

from tfp_adaptive import validation

__all__ = ['reliability_diagram', 'temperature']


def _pyplot():
  try:
    return importlib.import_module('matplotlib.pyplot')
  except ImportError:
    raise ImportError('Plots need matplotlib: pip install '
                      '\'tfp_adaptive[diagnostics]\'.') from None


def temperature(history, tau=1., ax=None):
  """The configurational temperature (overall and per layer) against epochs.

  Args:
    history: a `keras.callbacks.History` (``model.fit``'s return value), its
      ``.history`` dict, or `SamplerMonitor.temperatures`.
    tau: the sampling temperature, drawn as a dashed line.
    ax: a matplotlib axis (default: a new figure's).

  Returns:
    The axis.
  """
  history = getattr(history, 'history', history)
  # `fit`'s history names the reading `temperature_reading`; the monitor's
  # own `temperatures` keeps the older `temperature` keys.
  name = ('temperature_reading' if 'temperature_reading' in history else
          'temperature')
  keys = [k for k in history if k == name or k.startswith(name + '/')]
  if not keys:
    raise ValueError('No temperature in the history: was SamplerMonitor '
                     'among the callbacks of fit?')
  if ax is None:
    ax = _pyplot().subplots(figsize=(6, 3.5))[1]
  for key in keys:
    values = np.asarray(history[key], np.float64)
    ax.plot(np.arange(len(values)) + 2, values,
            lw=2 if key == name else 1,
            label='overall' if key == name else key.split('/', 1)[1])
  ax.axhline(tau, color='k', ls='--', lw=1, label='τ')
  ax.set_xlabel('epoch')
  ax.set_ylabel('configurational temperature')
  ax.legend(fontsize=8)
  return ax


def reliability_diagram(probs, labels, num_bins=10, ax=None):
  """Accuracy against confidence in `num_bins` bins of the top-class probability.

  Args:
    probs: ``[n, K]`` predictive probabilities (e.g. ``ensemble.predict(x)``).
    labels: ``[n]`` integer labels.
    num_bins: number of equal-width confidence bins.
    ax: a matplotlib axis (default: a new figure's).

  Returns:
    The axis. A calibrated predictor lies on the diagonal.
  """
  validation.check_int('num_bins', num_bins)
  probs = np.asarray(probs, np.float64)
  labels = np.asarray(labels).reshape(-1)
  conf = probs.max(-1)
  correct = probs.argmax(-1) == labels
  bins = np.minimum((conf * num_bins).astype(int), num_bins - 1)
  centres, accuracy, counts = [], [], []
  for b in range(num_bins):
    inside = bins == b
    if inside.any():
      centres.append(conf[inside].mean())
      accuracy.append(correct[inside].mean())
      counts.append(inside.sum())
  if ax is None:
    ax = _pyplot().subplots(figsize=(3.5, 3.5))[1]
  ax.plot([0, 1], [0, 1], color='k', ls='--', lw=1)
  ax.scatter(centres, accuracy, s=10 + 90 * np.asarray(counts) / max(counts))
  ax.plot(centres, accuracy)
  ax.set_xlabel('confidence')
  ax.set_ylabel('accuracy')
  ax.set_xlim(0, 1)
  ax.set_ylim(0, 1)
  return ax
