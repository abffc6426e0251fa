"""The Euler–Maruyama step of Riemannian Langevin dynamics, the Adam-SGLD drift, and the SGHMC and SGNHT steps."""

import tensorflow as tf

from tfp_adaptive.core import tensors

__all__ = ['adam_sgld_drift', 'hamiltonian_step', 'langevin_step',
           'thermostat_step']


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


def hamiltonian_step(parts, velocity, drift, noise, step_size, friction,
                     gradient_noise=0., temperature=1., gamma=None,
                     position_map=None):
  """SGHMC (Chen, Fox & Guestrin 2014, eq. 15), scaled so that friction 1 is SGLD.

  ``v' = (1 − α) v + (h/2)(S ∇û + τ c Γ) + sqrt((α − β̂) h τ) ξ`` and
  ``θ' = θ + S v'``, where ``S = M^{1/2}`` is the square root of the metric
  (``I`` for SGHMC itself) and ``Γ_i = Σ_j ∂S_ij/∂θ_j`` its divergence
  (docs, "The mathematics": the complete recipe of Ma, Chen & Fox 2015 with
  ``Q = [[0, −S], [S, 0]]`` and friction ``α``).

  With ``η = h/2`` and ``S = I`` this is Chen et al.'s practical form (their
  learning rate ``η``, friction ``α = ηC`` and noise estimate
  ``β̂ = ηB̂/2``); BlackJAX's ``sghmc`` integrates the same diffusion with
  ``step_size = sqrt(η)`` and a friction rate ``alpha = α/sqrt(η)``, the
  position moved before the momentum (docs, "The mathematics"). The
  velocity is ``v = η r`` for a momentum ``r`` of
  mass ``I/η``; its stationary variance is ``η τ``. At ``α = 1`` and
  ``β̂ = 0`` the velocity is forgotten every step and the update is
  ``θ' = θ + (h/2)(M ∇û + τ c S Γ) + sqrt(h τ) S ξ``: SGLD's step (`langevin_step`)
  for ``S = I``, preconditioned SGLD's for a constant metric.

  Args:
    parts: list of `Tensor`s, ``θ_t``.
    velocity: list, ``v_t``.
    drift: list, ``S ∇û(θ_t)`` (``∇û`` for SGHMC).
    noise: list, ``ξ ~ N(0, I)``.
    step_size: ``h`` (``2η``).
    friction: ``α`` in (0, 1].
    gradient_noise: ``β̂`` in [0, α), the share of the injected noise that
      the minibatch gradient's own noise is taken to supply.
    temperature: ``τ``.
    gamma: list ``c Γ`` already scaled for its mode, or `None`.
    position_map: callable ``v ↦ S v``, or `None` for ``S = I``.

  Returns:
    ``(θ_{t+1}, v_{t+1})``.
  """
  dtype = parts[0].dtype
  h = tf.cast(step_size, dtype)
  a = tf.cast(friction, dtype)
  tau = tf.cast(temperature, dtype)
  sd = tf.sqrt((a - tf.cast(gradient_noise, dtype)) * h * tau)
  if gamma is not None:
    drift = [d + tau * g for d, g in zip(drift, gamma)]
  return _velocity_step(parts, velocity, [a] * len(parts), drift, noise, h,
                        sd, position_map)


def _velocity_step(parts, velocity, frictions, drift, noise, h, sd,
                   position_map=None):
  """``v' = (1 − f) v + (h/2) d + sd·ξ`` and ``θ' = θ + S v'``, per part."""
  new_velocity = [(1. - f) * v + 0.5 * h * d + sd * n
                  for v, f, d, n in zip(velocity, frictions, drift, noise)]
  moves = new_velocity if position_map is None else position_map(new_velocity)
  return [x + m for x, m in zip(parts, moves)], new_velocity


def thermostat_step(parts, velocity, thermostat, drift, noise, step_size,
                    diffusion, temperature, batch_ndims, mean_square=None):
  """SGNHT (Ding et al. 2014, Alg. 2), scaled as `hamiltonian_step`.

  ``v' = (1 − ξ) v + (h/2) ∇û + sqrt(A h τ) ζ``, ``θ' = θ + v'`` and
  ``ξ' = ξ + ‖v'‖²/D − τh/(2 − ξ)``, one thermostat ``ξ`` per chain. The
  thermostat is a friction that rises while the velocity's mean square is
  above its stationary value (the chain runs hot, e.g. from minibatch
  gradient noise of unknown size) and falls while it is below. With
  ``η = h/2`` this is Ding et al.'s step (BlackJAX's ``sgnht`` integrates
  it with ``step_size = sqrt(η)`` and ``alpha = A/sqrt(η)``), except for
  the thermostat's target: theirs is the continuous-time ``τη``; ``τh/(2 − ξ)`` is the
  stationary mean square of the discrete recursion of ``v`` at friction
  ``ξ``, which ``τη`` undershoots by the factor ``1 − ξ/2`` (the chain then
  samples cold; docs, "The mathematics").

  Args:
    parts, velocity, drift, noise, step_size, temperature: as in
      `hamiltonian_step`.
    thermostat: ``ξ``, batch-shaped (one per chain).
    diffusion: ``A > 0``, the injected noise's friction (Ding et al.'s
      ``A``; BlackJAX's ``alpha·step_size``).
    batch_ndims: number of leading chain axes.
    mean_square: optional callable mapping ``v'`` to ``‖v'‖²/D`` per chain,
      for a caller that sums it in one pass with other inner products
      (`Algorithm.update`); by default one `tensors.event_dot`.

  Returns:
    ``(θ_{t+1}, v_{t+1}, ξ_{t+1})``.
  """
  dtype = parts[0].dtype
  h = tf.cast(step_size, dtype)
  tau = tf.cast(temperature, dtype)
  sd = tf.sqrt(tf.cast(diffusion, dtype) * h * tau)
  new_parts, new_velocity = _velocity_step(
      parts, velocity,
      [tensors.broadcast_to_part(thermostat, x, batch_ndims) for x in parts],
      drift, noise, h, sd)
  if mean_square is None:
    size = tensors.event_size(parts, batch_ndims)
    mean_square = lambda v: tensors.event_dot(v, v, batch_ndims) / size
  # The target: the stationary mean square of ``v' = (1 − ξ) v + …`` at
  # friction ξ, ``τh/(2 − ξ)`` (held at its ξ = 1 value above 1, so that a
  # hot start cannot push it towards the pole at 2).
  target = h * tau / (2. - tf.minimum(thermostat, 1.))
  return (new_parts, new_velocity,
          thermostat + mean_square(new_velocity) - target)
