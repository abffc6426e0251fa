"""The panel: does every run that is off its target warn, and no run that is on it?

Each target has a reference for its posterior sds: exact (a correlated
Gaussian, a Bayesian linear regression with full-batch and with minibatch
gradients, Neal's funnel's marginals) or a NUTS run of TFP's in the same
process (eight schools, a Bayesian logistic regression on scikit-learn's
breast cancer data, and a small Bayesian MLP, `benchmarks.bayesian_mlp`).
Each sampler runs with `tfa.mcmc.sample` at the documented settings and at
some off them, with Γ dropped, corrected, or with the metric frozen after
burn-in. Reported per run: the largest relative error of the sds (with its
Monte Carlo standard error) over the quantities a user reads, the
configurational temperature (`tfa.mcmc.check_temperature`) in its virial
and its Laplacian form, every warning the run gave, and the time. A
Bayesian linear regression also runs through `model.fit` with the Keras
optimizers (`benchmarks.panel_fit`), where the live reading and the members' reading
on the training data are told apart.

The quantities compared: the coordinates (unconstrained for eight
schools); where the posterior's scale is known, the whitened coordinates
(``(θ − μ)ᵀL`` with ``LLᵀ = Σ⁻¹`` for the Gaussians, ``x`` over its
conditional sd for the funnels), each of sd 1, and for the funnels that
whitened ``x`` in the neck (`benchmarks.panel_truth.funnel_quantities`);
where there is a model, its predictions (the logits at 50 inputs, for the
logistic regression and the MLP, whose weights have no meaningful marginal
sds), which those runs also pass to `tfa.mcmc.sample` to be read
(`predictions`).

The means are compared too, each shift in the reference's sds. A run is
*biased* when an sd's relative error or a mean's shift exceeds the
documented 5% by more than two standard errors, *accurate* when every one
is within 5% by as much, and *unclear* in between (the run is too short
to tell). The confusion matrix counts them against warned/silent.

    python -m benchmarks.panel [--quick]
    python -m benchmarks.panel --generated [--runs 200] [--seed S] [--quick]

``--generated`` draws the targets and the settings at random
(`benchmarks.panel_generated`).
"""

import os

import numpy as np
import tensorflow as tf

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import panel_fit
from benchmarks import panel_truth as truth
from benchmarks import regimes
from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import temperature as temperature_lib


def _gaussian_2d():
  cov = np.array([[1., 0.8], [0.8, 1.]])
  prec = tf.constant(np.linalg.inv(cov), tf.float32)

  def log_prob(x):
    return -0.5 * tf.einsum('...i,ij,...j->...', x, prec, x)
  reference, project, empirical = truth.gaussian(cov, np.zeros(2))
  return (log_prob, reference, np.zeros([truth.CHAINS, 2], np.float32), None,
          project, empirical)


def _regression(batch_size=None):
  fn, cov, mean = regimes._linear_regression()  # pylint: disable=protected-access
  if batch_size is not None:  # The same data and prior, in minibatches.
    data = tuple(tf.constant(a, tf.float32) for a in regimes.regression_data())
    fn = tfa.minibatch_log_prob(
        lambda parts, batch: -0.5 * (batch[1] - tf.einsum(
            'nd,...d->...n', batch[0], parts[0])) ** 2 / regimes.SIGMA2,
        data, batch_size,
        log_prior_fn=lambda parts: -0.5 * tf.reduce_sum(
            parts[0] ** 2, -1) / regimes.PRIOR_VAR)
  init = np.tile(mean, (truth.CHAINS, 1)).astype(np.float32)
  reference, project, empirical = truth.gaussian(cov, mean)
  return fn, reference, init, None, project, empirical


def _funnel():
  """Neal's funnel, ``v ~ N(0, 1.5²)``, ``x | v ~ N(0, e^v)``: exact marginal sds, ``x e^{−v/2}``'s (1) and the neck's."""
  sv = 1.5

  def log_prob(z):
    v, x = z[..., 0], z[..., 1]
    return -0.5 * v ** 2 / sv ** 2 - 0.5 * v - 0.5 * x ** 2 * tf.exp(-v)
  sds = np.array([sv, np.sqrt(np.exp(sv ** 2 / 2.)), 1.,
                  np.sqrt(truth.NECK_MASS)])
  return (log_prob, truth.exact(sds, 0.),
          np.zeros([truth.CHAINS, 2], np.float32), None,
          truth.funnel_quantities(sv, lambda x: x[..., 1:] * np.exp(
              -x[..., :1] / 2.), 0))


def _yu_funnel():
  """Yu et al.'s funnel with N(0, 1) gradient noise (`benchmarks.yu_funnel`): exact marginal sds, ``x / sqrt(softplus(v))``'s (1) and the neck's."""
  from benchmarks import yu_funnel  # pylint: disable=g-import-not-at-top
  v = np.linspace(-40., 40., 200001)
  pv = np.exp(-0.5 * (v / yu_funnel.SIGMA) ** 2)
  pv /= pv.sum()
  sds = np.array([np.sqrt(np.sum(pv * np.log1p(np.exp(v)))), yu_funnel.SIGMA,
                  1., np.sqrt(truth.NECK_MASS)])
  return (yu_funnel.NoisyGradientFunnel(), truth.exact(sds, 0.),
          np.zeros([truth.CHAINS, 2], np.float32), None,
          truth.funnel_quantities(
              yu_funnel.SIGMA,
              lambda x: x[..., :1] / np.sqrt(np.logaddexp(0., x[..., 1:])),
              1))


def _logistic():
  """Breast cancer's logistic regression: its coefficients and its logits at 50 of its inputs, against NUTS."""
  from sklearn import datasets, preprocessing  # pylint: disable=g-import-not-at-top
  d = datasets.load_breast_cancer()
  x = preprocessing.StandardScaler().fit_transform(d.data)
  x = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float32)
  xt, yt = tf.constant(x), tf.constant(d.target.astype(np.float32))

  def log_prob(w):
    logits = tf.einsum('nd,...d->...n', xt, w)
    lik = -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.broadcast_to(yt, tf.shape(logits)), logits=logits), -1)
    return lik - 0.5 * tf.reduce_sum(w ** 2, -1)
  inputs = x[::len(x) // 50][:50].astype(np.float64)
  project = truth.coordinates_and(lambda w: w @ inputs.T)
  ref = project(truth.nuts_sds(log_prob, tf.zeros([64, x.shape[1]])).numpy())
  test_inputs = tf.constant(inputs, tf.float32)
  return (log_prob, truth.group_moments(ref),
          np.zeros([truth.CHAINS, x.shape[1]], np.float32), None, project,
          None, lambda w: tf.einsum('nd,...d->...n', test_inputs, w))


def _mlp():
  from benchmarks import bayesian_mlp  # pylint: disable=g-import-not-at-top
  target = bayesian_mlp.Target()
  ref = target.project(target.nuts(32, 1000))
  return (target.minibatch, truth.group_moments(ref),
          target.init(truth.CHAINS, 5), None,
          target.project, None, target.logits)


def _eight_schools():
  from tests.mcmc import test_eight_schools as es  # pylint: disable=g-import-not-at-top
  ref = es._nuts(64, 2000)  # pylint: disable=protected-access
  # pylint: disable=protected-access
  return (es._log_prob, truth.group_moments(truth.flat(ref, es.BIJECTORS)),
          es._start(truth.CHAINS), es.BIJECTORS)


def _psgld(alpha, bias, gamma, frozen=False):
  return lambda fn, h: tfa.mcmc.PSGLD(
      fn, h, alpha, bias, gamma=gamma,
      num_adaptation_steps=2000 if frozen else None)


def _monge(alpha, gamma):
  return lambda fn, h: tfa.mcmc.MongeSGRLD(fn, h, 1., alpha, gamma=gamma)


SGLD = lambda fn, h: tfa.mcmc.SGLD(fn, h)


def runs(quick):
  """``(target, build(), [(label, factory, h, steps, thin), ...])`` rows."""
  def pre(a, b):
    return [('PSGLD α=%g bias=%g %s' % (a, b, g), _psgld(a, b, g, f), f)
            for g, f in (('none', False), ('corrected', False),
                         ('none', True))]
  table = [
      ('gaussian 2-D', _gaussian_2d, [
          ('SGLD', SGLD, 0.05, 20000, 10), ('SGLD', SGLD, 0.5, 20000, 10)] + [
              (label.replace(' none', ' frozen') if f else label, k, h,
               20000, 10)
              for label, k, f in pre(0.5, 0.1) for h in (0.02, 0.2)]),
      ('regression', _regression, [
          ('SGLD', SGLD, 4e-5, 40000, 20)] + [
              (label.replace(' none', ' frozen') if f else label, k, h,
               40000, 20)
              for label, k, f in pre(0.5, 1e3) for h in (4.8e-4,)] + [
                  ('PSGLD α=0.9 bias=0.001 corrected',
                   _psgld(0.9, 1e-3, 'corrected'), 1.6e-5, 40000, 20)]),
      ('regression, minibatch 20', lambda: _regression(20), [
          ('SGLD', SGLD, 1e-5, 40000, 20), ('SGLD', SGLD, 1e-4, 40000, 20),
          ('PSGLD α=0.99 bias=1 corrected', _psgld(0.99, 1., 'corrected'),
           1e-4, 120000, 60)]),
      ('funnel', _funnel, [
          ('SGLD', SGLD, 0.05, 40000, 20),
          ('PSGLD α=0.5 bias=0.1 corrected', _psgld(0.5, 0.1, 'corrected'),
           0.05, 40000, 20),
          ('Monge α=0.9 corrected', _monge(0.9, 'corrected'), 0.05, 40000,
           20),
          ('PSGLD α=0.5 bias=0.1 frozen', _psgld(0.5, 0.1, 'none', True),
           0.02, 100000, 50)]),
      ('funnel, noisy ĝ (Yu et al.)', _yu_funnel, [
          ('SGLD', SGLD, 1e-3, 160000, 80)] + [
              ('RMSprop α=0.995 bias=0 %s' % g, _psgld(0.995, 0., g), 2.5e-3,
               160000, 80) for g in ('none', 'corrected')] + [
                   ('RMSprop α=0.9 bias=0 corrected',
                    _psgld(0.9, 0., 'corrected'), 2.5e-3, 160000, 80),
                   ('RMSprop α=0.995 bias=0 frozen',
                    _psgld(0.995, 0., 'none', True), 2.5e-3, 160000, 80)] + [
                   ('Shampoo α=0.9995 ε=1e-6 %s' % g,
                    lambda fn, h, g=g: tfa.mcmc.ShampooSGRLD(
                        fn, h, 0.9995, 1e-6, 1, gamma=g), 3e-3, 160000, 80)
                   for g in ('none', 'corrected')]),
      ('logistic, breast cancer', _logistic, [
          ('SGLD', SGLD, 2e-3, 60000, 30), ('SGLD', SGLD, 2e-2, 60000, 30),
          ('PSGLD α=0.5 bias=1 corrected', _psgld(0.5, 1., 'corrected'),
           2e-3, 60000, 30),
          ('PSGLD α=0.5 bias=1 frozen', _psgld(0.5, 1., 'none', True), 2e-3,
           60000, 30)]),
      ('eight schools', _eight_schools, [
          ('PSGLD α=0.5 bias=0.001 corrected',
           _psgld(0.5, 1e-3, 'corrected'), 1e-3, 240000, 120),
          ('PSGLD α=0.5 bias=0.001 frozen',
           _psgld(0.5, 1e-3, 'none', True), 1e-3, 240000, 120),
          ('PSGLD α=0.99 bias=0.001 frozen',
           _psgld(0.99, 1e-3, 'none', True), 1e-3, 240000, 120),
          ('Monge α=0.9 corrected', _monge(0.9, 'corrected'), 0.05, 20000,
           10),
          ('SGLD', SGLD, 0.05, 20000, 10)]),
      ('Bayesian MLP, minibatch 10', _mlp, [
          ('SGLD', SGLD, 3e-4, 40000, 40), ('SGLD', SGLD, 3e-3, 40000, 40)] + [
              (label.replace(' none', ' frozen') if f else label, k, h,
               40000, 40)
              for label, k, f in pre(0.95, 1e-3) for h in (3e-3,)] + [
                  ('PSGLD α=0.95 bias=0.001 corrected',
                   _psgld(0.95, 1e-3, 'corrected'), 3e-2, 40000, 40),
                  ('PSGLD α=0.95 bias=0.001 frozen',
                   _psgld(0.95, 1e-3, 'none', True), 1e-3, 120000, 120)]),
  ]
  if quick:  # That every piece runs, at one target: an accurate run, a biased one.
    first = table[0]
    return [(first[0], first[1], first[2][:2])]
  return table


def sweep(quick):
  rows = []
  for target, build, configs in runs(quick):
    built = build()
    fn, reference, init = built[:3]
    bijectors = built[3] if len(built) > 3 else None
    project = built[4] if len(built) > 4 else None
    empirical = built[5] if len(built) > 5 else None
    predictions = built[6] if len(built) > 6 else None
    for label, factory, h, steps, thin in configs:
      samples, readings, said, seconds = truth.run_one(
          fn, init, bijectors, factory, h, steps, thin, quick,
          predictions)[:4]
      err, se, what = truth.run_error(samples, reference, bijectors, project)
      reading, laplacian = readings['overall'], readings.get('laplacian')
      laplacian_says = (None if laplacian is None else
                        temperature_lib.final_verdict(laplacian))
      shift = _largest_shift(readings['mean_force'])
      rows.append(dict(target=target, sampler=label, h=h, err=err, se=se,
                       what=what, shift=shift,
                       predicted=readings.get('predictions'),
                       truth=truth.classify(err, se), reading=reading,
                       laplacian=laplacian, warned=bool(said), said=said,
                       seconds=seconds,
                       empirical=None if empirical is None else empirical(
                           samples)))
      rows[-1]['virial_warns'] = temperature_lib.final_verdict(
          reading) not in ('accurate', 'too short')
      print('%-24s %-34s h=%-8g %s err %+.3f ± %.3f  T = %.3f ± %.3f  '
            'T_L = %s (%s)  F = %s  F_f = %s  %s'
            % (target, label, h, what, err, se, reading.temperature,
               reading.standard_error, format_reading(laplacian), laplacian_says,
               _shift(shift), _shift(rows[-1]['predicted']),
               ', '.join(said) or 'silent'), flush=True)
  return rows


def fit_sweep(quick):
  """`sweep`'s rows for the runs in `fit` (`benchmarks.panel_fit`).

  Each configuration runs as 8 chains (seeds; 2 in `quick`); the error
  is over all of them. Chain 0 is the user's run: its warnings, its
  members' reading. ``warned``: what a run with
  ``SampleCollector(training_data=(x, y))`` says (the live reading's
  warnings and the members').
  """
  _, _, precision, mean = panel_fit.regression()
  reference, project, empirical = truth.gaussian(np.linalg.inv(precision), mean)
  rows = []
  for label, optimizer, batch_size, h in panel_fit.configurations(quick):
    runs = [panel_fit.run_one(optimizer(seed), batch_size, seed,
                              panel_fit.EPOCHS // (10 if quick else 1))
            for seed in range(2 if quick else 8)]
    _, said, readings, seconds = runs[0]
    n = min(len(r[0]) for r in runs)
    err, se, what = truth.run_error(np.stack([r[0][-n:] for r in runs], 1),
                              reference, project=project)
    reading, laplacian = readings['overall'], readings['laplacian']
    rows.append(dict(
        target='regression in fit', sampler=label, h=h, err=err, se=se,
        what=what, shift=_largest_shift(readings['mean_force']),
        predicted=readings['predictions'], truth=truth.classify(err, se),
        reading=reading, laplacian=laplacian, live=readings['live'],
        empirical=empirical(runs[0][0][:, None]),
        warned=bool(said['live'] or said['members']),
        said=['%s: %s' % (who, k) for who in ('live', 'members')
              for k in sorted({truth.kind(m) for m in said[who]})],
        seconds=seconds,
        virial_warns=temperature_lib.final_verdict(reading) not in (
            'accurate', 'too short')))
    print('%-24s %-50s h=%-8g %s err %+.3f ± %.3f  T = %.3f  T_L = %.3f  '
          'T_live = %s  F = %s  F_f = %s  %s' % (
              'regression in fit', label, h, what, err, se,
              reading.temperature, laplacian.temperature,
              format_reading(rows[-1]['live']), _shift(rows[-1]['shift']),
              _shift(rows[-1]['predicted']),
              ', '.join(rows[-1]['said']) or 'silent'), flush=True)
  return rows


def _largest_shift(shifts):
  """The `tfp_adaptive.diagnostics.mean_force.Shift` of the part furthest outside its band."""
  return max(shifts.values(),
             key=lambda f: abs(f.shift) - f.interval_z * f.standard_error)


def _shift(f):
  if f is None:
    return '—'
  return '%+.2g ± %.2g (%s)' % (f.shift, f.standard_error,
                                mean_force.verdict(f))


def format_reading(r):
  """A `Reading` as ``T ± se`` (``—`` for `None`)."""
  return '—' if r is None else '%.3g ± %.2g' % (r.temperature,
                                               r.standard_error)


def within_ten_percent(reading, empirical):
  """Whether `reading` is within 10% of `empirical`, plus three combined standard errors."""
  return bool(abs(reading.temperature - empirical.temperature) <=
              0.1 * empirical.temperature + 3. * np.hypot(
                  reading.standard_error, empirical.standard_error))


def confusion(rows, key='warned'):
  truths = ('accurate', 'biased', 'unclear')
  counts = {(t, w): 0 for t in truths for w in (True, False)}
  for r in rows:
    counts[(r['truth'], r[key])] += 1
  return [[truth, str(counts[(truth, True)]), str(counts[(truth, False)])]
          for truth in truths]


def main():
  from benchmarks import panel_generated  # pylint: disable=g-import-not-at-top
  parser = common.parser(__doc__.splitlines()[0])
  parser.add_argument('--generated', action='store_true',
                      help='targets and settings drawn at random '
                      '(benchmarks.panel_generated)')
  panel_generated.add_arguments(parser)
  args = parser.parse_args()
  if args.generated:
    return panel_generated.main(args)
  out = common.out_dir(args.out)
  kernel_rows = sweep(args.quick)
  fit_rows = fit_sweep(args.quick)
  rows = kernel_rows + fit_rows
  table = [[r['target'], r['sampler'], '%g' % r['h'],
            '%+.3g ± %.2g (%s)' % (r['err'], r['se'], r['what']), r['truth'],
            format_reading(r['reading']), format_reading(r['laplacian']),
            _shift(r['shift']), _shift(r['predicted']),
            '—' if r['empirical'] is None else ' / '.join(
                format_reading(e) for e in r['empirical']),
            format_reading(r.get('live')),
            ', '.join(r['said']) or '—', '%.1f' % r['seconds']] for r in rows]
  exact = [r for r in rows if r['empirical'] is not None]
  within = [sum(r[key] is not None and within_ten_percent(r[key], r['empirical'][i])
                for r in exact) for i, key in enumerate(('reading',
                                                         'laplacian'))]
  live_within = sum(r['live'] is not None and within_ten_percent(r['live'],
                                                      r['empirical'][0])
                    for r in fit_rows)
  note = ('Command: `python -m benchmarks.panel%s`. %d chains per run, half '
          'the steps burn-in. "error": the error that decides the run (the '
          'one most clearly beyond 5%%, else the one least clearly within '
          'it), of a posterior sd (relative) or of a mean (in the '
          'reference\'s sds), over the coordinates (unconstrained for eight '
          'schools), the whitened coordinates where the scale is known (the '
          'Gaussians, the funnels; for the funnels also the whitened x in the '
          'neck, v below minus one sd, 0 elsewhere, of sd sqrt(Φ(−1))) and '
          'the logits at 50 inputs where there '
          'is a model (the logistic regression, the MLP), ± its standard '
          'error over 8 groups of chains (and of the NUTS reference\'s, where '
          'there is one); biased when beyond 5%% by two standard errors or '
          'off by more than 100%%, accurate when within 5%% by as much, '
          'unclear between. Temperatures: the virial and the Laplacian form '
          '(`tfa.mcmc.check_temperature`), both warned on. Mean force: '
          'sd(θ)·⟨∂U/∂θ⟩ of the coordinate furthest from balance, 0 at the '
          'target, warned on beyond 0.05 (`tfa.mcmc.check_temperature`, '
          '`tfp_adaptive.diagnostics.mean_force`), with its verdict. Prediction '
          'force: sd(f)·⟨∇f·∇U − τΔf⟩/⟨|∇f|²⟩ of the prediction furthest from '
          'balance, where the run reads predictions (the logits at the 50 '
          'inputs for the logistic regression and the MLP, passed to '
          '`tfa.mcmc.sample` as `predictions`; the model\'s outputs at 64 '
          'training inputs in `fit`), 0 at the target, warned on alike '
          '(`tfp_adaptive.diagnostics.prediction_force`). Empirical '
          'temperatures: where the posterior is an exact Gaussian N(μ, Σ), '
          'the samples\' ⟨(θ − μ)ᵀΣ⁻¹(θ − μ)⟩/D and ⟨|Σ⁻¹(θ − μ)|²⟩/tr Σ⁻¹, '
          'what the virial and the Laplacian form estimate '
          '(`benchmarks.panel_truth.empirical_temperature`); the virial '
          'reads its own within 10%% (plus three combined standard errors) '
          'in %d of '
          'these %d runs, the Laplacian form in %d. Warnings: the '
          'names of what `tfa.mcmc.sample` warned about.\n\n"regression in '
          'fit": `model.fit` runs of the Keras optimizers on a Bayesian linear '
          'regression (`benchmarks.panel_fit`): the error over 8 chains '
          '(seeds), ± its error over them; the first chain\'s warnings, '
          '"live" what the reading in `fit` said, "members" what its '
          'members\' reading on the training data said '
          '(`SampleCollector(training_data=(x, y))`), and the temperatures '
          'are its members\' (the empirical one, of the first chain\'s '
          'members). "live": the reading in `fit` of the first chain '
          '(`SampleCollector.live_readings`), which reads its '
          'empirical temperature within 10%% (as above) in %d of these %d '
          'runs; its every-step reading takes the step\'s own heating '
          'out, and each epoch\'s first step, a fresh batch, replaces it '
          'when it reads it too cold (guide "Reading the diagnostics"). '
          'The members\' reading on the training data is the precise one '
          '(with it, a `drift_ratio` warning waits for that reading and is '
          'dropped when it confirms the temperature).\n\nConfusion matrix '
          '(runs):\n\n%s\n\nHad the virial alone been warned on (its '
          'reading\'s verdict):\n\n%s'
          % (' --quick' if args.quick else '', truth.CHAINS, within[0],
             len(exact), within[1], live_within, len(fit_rows),
             common.markdown_table(['', 'warned', 'silent'], confusion(rows)),
             common.markdown_table(['', 'warned', 'silent'],
                                   confusion(rows, 'virial_warns'))))
  common.write_table(
      os.path.join(out, 'panel.md'),
      'The panel: runs off their target against the warnings',
      ['target', 'sampler', 'h', 'error', 'truth',
       'configurational temperature', 'Laplacian form', 'mean force',
       'prediction force', 'empirical temperatures', 'live reading',
       'warnings',
       'seconds'], table, note)


if __name__ == '__main__':
  main()
