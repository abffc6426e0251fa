"""Every message a run's readings call for: the temperature's, the mean force's and the prediction force's, in that order.

`tfp_adaptive.mcmc.check_temperature` (kernels) and the members' reading
of `tfp_adaptive.keras` (`BayesianEnsemble.check_temperature`, the
collector's reading on `training_data`) read the same three things and
word them alike; this is the one sequence both call.
"""

from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import monge_advice
from tfp_adaptive.diagnostics import prediction_force
from tfp_adaptive.diagnostics import temperature_advice

__all__ = ['messages']


def messages(readings, shifts, predicted, where, predictions_where,
             temperature, step_name, adaptive=False, gamma='none',
             burnin_share=None, pull=None, alpha2=None, gradient_scale=1.,
             **options):
  """The advice of a run read whole, per part and on its predictions: a list of messages.

  Args:
    readings: ``{key: Reading}`` with ``'overall'`` (the whole state, the
      one the others wait for) and ``'laplacian'`` (its Laplacian form),
      besides the parts'.
    shifts: ``{key: Shift}``, the mean force per part.
    predicted: the prediction force's `Shift`, or `None`.
    where: ``where(key)``, the words for a part (or a whole).
    predictions_where: the words for the predictions.
    temperature: τ, the target temperature.
    step_name, adaptive, gamma, burnin_share: as
      `temperature_advice.advice_per_part` and `mean_force.advice_per_part`
      take them.
    pull, alpha2, gradient_scale: the chains' `monge_advice.Pull` and a
      Monge metric's ``α²`` (`None` for other samplers), with
      `monge_advice.advice`'s `gradient_scale`: chains that crawl are told
      to lower ``alpha2``.
    **options: the rest of `temperature_advice.advice_per_part`'s
      arguments (`tolerance`, `draws`, `step_share`, ...).
  """
  out = list(temperature_advice.advice_per_part(
      readings, 'overall', where, temperature, step_name, adaptive=adaptive,
      gamma=gamma, extra_wholes=('laplacian',), precise=True,
      burnin_share=burnin_share, **options).values())
  out += mean_force.advice_per_part(shifts, readings['overall'], where,
                                    step_name, adaptive, gamma, burnin_share)
  if predicted is not None:
    out += mean_force.advice_per_part(
        {0: predicted}, readings['overall'], lambda _: predictions_where,
        step_name, adaptive, gamma, burnin_share,
        formula=prediction_force.FORMULA, item='prediction')
  if pull is not None and alpha2 is not None:
    crawl = monge_advice.advice(pull, alpha2, gradient_scale)
    out += [crawl] if crawl is not None else []
  return out
