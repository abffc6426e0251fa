"""Every sampler × Γ mode matches its predicted small-step stationary density.

Target N(0, 1). Chains start from the *predicted* density (inverse CDF), so
the test measures invariance, not burn-in. Pass: the TV distance of the
pooled histogram to the prediction is within 3× its Monte Carlo noise level
(measured from 20 independent chain groups) plus a small O(h) allowance; and
every alternative prediction is further away by more than that bound, so the
test can tell the modes apart.
"""

import numpy as np
import pytest

import tfp_adaptive as tfa
from tfp_adaptive import diagnostics
from tests import stationary
from tests.conftest import full_size_only, in_ci, stat_scale

H = 1e-3
BIAS = 1.0  # stability constant: keeps M bounded so h = 1e-3 is "small".
ALLOW = 0.004  # O(h) Euler–Maruyama + EMA-lag bias allowance at h = 1e-3.
GROUPS = 20


def _p(t):
  return np.exp(-0.5 * t * t)


def _predictions(metric, velocity=False):
  return lambda alpha: {m: diagnostics.predicted_density(m, metric, alpha,
                                                         velocity=velocity)
                        for m in ('none', 'original', 'corrected')}


_rms_predictions = _predictions(diagnostics.rmsprop_metric(BIAS))
_monge_predictions = _predictions(diagnostics.monge_metric(1.))


def test_predicted_densities_are_the_documented_formulas():
  """p·M⁻¹, p·M^-α, p with M = 1/sqrt(λ+θ²) (RMSprop) and 1/(1+θ²) (Monge)."""
  t = np.linspace(-3, 3, 13)
  rms, monge = _rms_predictions(0.7), _monge_predictions(0.7)
  np.testing.assert_allclose(rms['none'](t), _p(t) * np.sqrt(BIAS + t * t))
  np.testing.assert_allclose(rms['original'](t),
                             _p(t) * (BIAS + t * t) ** 0.35)
  np.testing.assert_allclose(monge['none'](t), _p(t) * (1. + t * t))
  np.testing.assert_allclose(monge['original'](t), _p(t) * (1. + t * t) ** 0.7)
  np.testing.assert_allclose(rms['corrected'](t), _p(t))
  half = _predictions(diagnostics.monge_metric(1.), velocity=True)(0.7)
  np.testing.assert_allclose(half['none'](t), _p(t) * (1. + t * t) ** 0.5)
  np.testing.assert_allclose(half['original'](t),
                             _p(t) * (1. + t * t) ** 0.35)


def test_adam_density_by_quadrature_is_eq_39():
  """The general eq. (35) quadrature reproduces the closed form for N(0,1)."""
  t = np.linspace(-3, 3, 13)
  density = diagnostics.adam_sgld_density(
      1., diagnostics.rmsprop_metric(0.1, True), lambda x: -x)
  closed = _p(t) * np.exp(-np.abs(t)) * (np.abs(t) + 0.1) ** 0.1
  np.testing.assert_allclose(density(t) / density(0.), closed / closed[6],
                             rtol=1e-5)


SAMPLERS = {
    'psgld': (lambda g, a: tfa.mcmc.PSGLD(lambda x: -0.5 * x ** 2, H, a, BIAS,
                                          gamma=g), _rms_predictions),
    'monge': (lambda g, a: tfa.mcmc.MongeSGRLD(lambda x: -0.5 * x ** 2, H, 1.,
                                               a, gamma=g), _monge_predictions),
    'shampoo': (lambda g, a: tfa.mcmc.ShampooSGRLD(lambda x: -0.5 * x ** 2, H,
                                                   a, BIAS, gamma=g),
                _rms_predictions),
}


def _check(kernel, predictions, mode, seed):
  n_chains = int(10000 * stat_scale()) // GROUPS * GROUPS
  init = stationary.draw(predictions[mode], n_chains, seed=seed)
  freqs = stationary.group_histograms(kernel, init, 3000, GROUPS, seed)
  probs = {m: stationary.binned(f) for m, f in predictions.items()}
  tv, noise = stationary.tv_with_noise(freqs, probs[mode])
  bound = 3. * noise + ALLOW
  assert tv < bound, (mode, tv, bound)
  for other, q in probs.items():
    if other != mode:
      tv_other = stationary.tv_with_noise(freqs, q)[0]
      assert tv_other > tv + bound, (mode, other, tv_other, tv, bound)


def _cases(in_ci):
  """Every metric × mode as test parameters; those for which ``in_ci(sampler, mode)`` holds run in CI (scale 1), the others at full size only."""
  for sampler in sorted(SAMPLERS):
    for mode in ('none', 'original', 'corrected'):
      marks = () if in_ci(sampler, mode) else (full_size_only(),)
      yield pytest.param(sampler, mode, marks=marks,
                         id='%s-%s' % (mode, sampler))


@pytest.mark.statistical
# In CI every mode of PSGLD and Monge, and Shampoo's corrected Γ (in 1-D
# its metric is RMSprop's, whose other modes PSGLD covers).
@pytest.mark.parametrize('sampler, mode', list(_cases(
    lambda sampler, mode: sampler != 'shampoo' or mode == 'corrected')))
def test_stationary_density_per_gamma_mode(sampler, mode):
  # α = 0.5 except for 'corrected' (Rensmeyer's α = 0.9, Γ scaled by 10): the
  # 'none' limit does not depend on α, and p·M^-0.5 sits clearly between
  # p·M^-1 and p, so every alternative is resolvable.
  alpha = 0.9 if mode == 'corrected' else 0.5
  make, predictions = SAMPLERS[sampler]
  _check(make(mode, alpha), predictions(alpha), mode, seed=7)


FRICTION = 0.03


@pytest.mark.statistical
# In CI every mode of PSGLD and the corrected Γ of the others.
@pytest.mark.parametrize('sampler, mode', list(_cases(
    lambda sampler, mode: sampler == 'psgld' or mode == 'corrected')))
def test_preconditioned_sghmc_density_per_gamma_mode(sampler, mode):
  """With a velocity, Γ is the divergence of ``M^{1/2}``: ``p·M^-1/2``, ``p·M^-α/2``, ``p``.

  α = 0.5 in every mode (``p·M^-1/4`` sits between the others), friction
  0.03: the step's bias grows with the friction (at friction 1 the chain
  is an Euler step of an overdamped diffusion whose density is
  ``p·M^{c/2-1}``, not the one above) and with the moving average's lag.
  """
  make, _ = SAMPLERS[sampler]
  metric = (diagnostics.monge_metric(1.) if sampler == 'monge'
            else diagnostics.rmsprop_metric(BIAS))
  predictions = _predictions(metric, velocity=True)(0.5)
  _check(make(mode, 0.5).copy(friction=FRICTION), predictions, mode, seed=11)


@pytest.mark.statistical
def test_adam_sgld_matches_rensmeyer_eq_35():
  """a = 1, β = 0.5, λ = 0.1 outside the sqrt: p·exp(-|θ|)(|θ| + 0.1)^0.1."""
  kernel = tfa.mcmc.AdamSGLD(lambda x: -0.5 * x ** 2, H, 0.9, 0.5, 1., 0.1)
  predictions = {
      'adam': lambda t: _p(t) * np.exp(-np.abs(t)) * (np.abs(t) + .1) ** .1,
      'target': _p}
  _check(kernel, predictions, 'adam', seed=8)


@pytest.mark.statistical
@pytest.mark.parametrize('sampler', ['psgld', 'monge'])
def test_gamma_on_a_quarter_of_the_steps_keeps_the_corrected_density(sampler):
  """``gamma_probability=0.25``: Γ/p on a random quarter of the steps.

  Unbiased drift, O(h²) extra variance: the density is still the target,
  and still resolvably different from the Γ-free and original ones.
  """
  make, predictions = SAMPLERS[sampler]
  kernel = make('corrected', 0.9).copy(gamma_probability=0.25)
  _check(kernel, predictions(0.9), 'corrected', seed=9)


@pytest.mark.statistical
@pytest.mark.parametrize('sampler, mode', in_ci(
    [('psgld', 'none'), ('psgld', 'corrected'), ('monge', 'none'),
     ('monge', 'corrected')], [('psgld', 'corrected'), ('monge', 'none')]))
def test_rademacher_noise_keeps_the_predicted_densities(sampler, mode):
  """``noise='rademacher'`` (±1, weak order 1): the same densities, the same
  tolerances; it changes nothing beyond the O(h) Euler–Maruyama bias."""
  alpha = 0.9 if mode == 'corrected' else 0.5
  make, predictions = SAMPLERS[sampler]
  kernel = make(mode, alpha).copy(noise='rademacher')
  _check(kernel, predictions(alpha), mode, seed=10)
