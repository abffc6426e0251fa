"""The Euler–Maruyama step of Riemannian Langevin dynamics and the Adam-SGLD drift."""

import tensorflow as tf

__all__ = ['adam_sgld_drift', 'langevin_step']


def langevin_step(parts, drift, noise, step_size, temperature=1., gamma=None):
  """``θ' = θ + (h/2)(M∇û + τ c Γ) + sqrt(h τ) M^{1/2} ξ``.

  Args:
    parts: list of `Tensor`s, ``θ_t``.
    drift: list, the preconditioned gradient ``M ∇û`` (or Adam-SGLD's drift).
    noise: list, ``M^{1/2} ξ`` with ``ξ ~ N(0, I)``.
    step_size: ``h`` (Rensmeyer's ε; the lecture's ``2η``), scalar.
    temperature: ``τ``; 1 samples the posterior, < 1 a cold posterior.
    gamma: list ``c Γ`` already scaled for its mode, or `None` to drop it.

  Returns:
    List of `Tensor`s, ``θ_{t+1}``.
  """
  out = []
  for i, (x, d, n) in enumerate(zip(parts, drift, noise)):
    h = tf.cast(step_size, x.dtype)
    tau = tf.cast(temperature, x.dtype)
    if gamma is not None:
      d = d + tau * gamma[i]
    out.append(x + 0.5 * h * d + tf.sqrt(h * tau) * n)
  return out


def adam_sgld_drift(grads, momentum, preconditioned_momentum, decay, drift_scale):
  """Adam-SGLD (Kim, Song & Liang 2022; Rensmeyer & Niggemann 2025, eq. 30–31).

  ``m_t = β m_{t-1} + (1-β) ∇û`` and the drift ``∇û + a M_t m_t``; the second
  argument of the result is the new ``m_t``. ``preconditioned_momentum`` maps
  ``m_t`` to ``M_t m_t``.
  """
  beta = tf.cast(decay, grads[0].dtype)
  new_m = [beta * m + (1. - beta) * g for m, g in zip(momentum, grads)]
  pm = preconditioned_momentum(new_m)
  a = tf.cast(drift_scale, grads[0].dtype)
  return [g + a * q for g, q in zip(grads, pm)], new_m
