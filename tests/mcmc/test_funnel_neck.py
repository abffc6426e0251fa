"""Neal's funnel: a run too wide in the neck alone is told.

The panel's funnel (``v ~ N(0, 1.5²)``, ``x | v ~ N(0, e^v)``), 64 chains
of SGLD at ``h = 0.05``, judged as the panel judges it: by the whitened
``x`` (``x e^{−v/2}``, sd 1) in the neck, ``v`` more than one sd below its
mean (0 elsewhere, sd ``sqrt(Φ(−1))``), with the standard error of its sd
over 8 groups of chains. The whitened ``x`` over the whole funnel is
within 5% by more than two standard errors, so no global sd shows the
bias; the neck is too wide by more than 5% plus two standard errors, and
`tfa.mcmc.sample` warns from the Laplacian form, which weighs the neck's
curvature most.
"""

import warnings

import pytest

import tfp_adaptive as tfa
from benchmarks import panel
from benchmarks import panel_truth as truth


@pytest.mark.slow
def test_a_funnel_too_wide_in_its_neck_alone_is_told():
  fn, (sds, _, _, _), init, _, project = panel._funnel()  # pylint: disable=protected-access
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    samples, _, _ = tfa.mcmc.sample(
        tfa.mcmc.SGLD(fn, 0.05), init, 2000, num_burnin_steps=20000,
        num_steps_between_results=19, seed=(3, 4), progress=False)
  got, se, _, _ = truth.group_moments(project(samples))
  error, se = got / sds - 1., se / sds
  whitened, neck = 2, 3
  assert abs(error[whitened]) + 2. * se[whitened] < truth.TOLERANCE, (
      error[whitened], se[whitened])
  assert error[neck] - 2. * se[neck] > truth.TOLERANCE, (error[neck], se[neck])
  said = [str(w.message) for w in caught if 'temperature' in str(w.message)]
  assert said and 'Laplacian form' in ' '.join(said), said
