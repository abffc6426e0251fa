"""Shampoo metric (Gupta et al. 2018; Yu et al. 2023, Sec. 3.2) by mode-wise contraction."""

import collections
import copy
import string

import tensorflow as tf

from tfp_adaptive import validation
from tfp_adaptive.core import preconditioner_base
from tfp_adaptive.core import roots as roots_lib
from tfp_adaptive.core import tensors

__all__ = ['ROOT_METHODS', 'Shampoo', 'ShampooModeState']

ROOT_METHODS = ('eigh', 'newton')

# One Kronecker factor: its EMA statistic, the cached roots (value of M and
# M^{1/2} along this mode), and what Γ needs to differentiate the root at the
# cached eigendecomposition (Daleckii–Krein divided differences).
ShampooModeState = collections.namedtuple(
    'ShampooModeState', ['factor', 'root', 'sqrt_root', 'eigvecs', 'divdiff'])

_LETTERS = string.ascii_lowercase


class Shampoo(preconditioner_base.Preconditioner):
  """Shampoo metric, ``M = ⊗_i (H^i + εI)^{-1/(2d)}``, never a D×D matrix.

  For a part of event shape ``(n_1, ..., n_d)`` and mode ``i``:
  ``H^i_t = λ H^i_{t-1} + (1-λ) ĝ_(i) ĝ_(i)ᵀ`` (contraction over all axes but
  ``i``). ``M^{1/2} = ⊗_i (H^i + εI)^{-1/(4d)}``. The persistent ridge ``ε`` is
  added at every root computation, so in one dimension the metric
  is ``1/sqrt(ε + V)``. Roots are recomputed by an eigendecomposition in
  float64 every ``update_interval`` steps. Modes of size 1 or larger than
  ``max_dim`` use a diagonal factor (sum of ``ĝ²`` over the other axes); a
  scalar part is RMSprop with ``diagonal_bias = ε``.

  With ``block_size``, an axis longer than ``block_size`` is split into
  equal blocks whose length is its largest divisor ``≤ block_size``, and
  every block of the part is its own tensor with its own factors (Yu et al.
  Sec. 3.2; Anil et al. 2021): ``M`` is block-diagonal over the blocks, a
  Kronecker product within each. The statistics and products then take
  ``Σ_i b_i`` multiply-adds per entry instead of ``Σ_i n_i``. An axis whose
  largest such divisor is 1 (a prime longer than ``block_size``) gets a
  diagonal factor.

  For Γ, the root is differentiated at the cached eigendecomposition,
  ``dR = U (F ∘ Uᵀ dH U) Uᵀ`` with ``F`` the divided differences of
  ``x ↦ x^p``: exact when ``update_interval == 1``.

  The eigenvectors and divided differences are kept only for Γ: a metric
  made by ``for_gamma('none')`` refreshes and stores the roots alone, a
  smaller state to carry and write back at every step.

  With ``roots='newton'`` the roots of the full factors come from the
  coupled Newton iteration instead (`tfp_adaptive.core.roots`, matrix
  products only, float64): ``S = (H + εI)^{-1/(4d)}`` and ``R = S²``. It
  keeps no eigenvectors, so it cannot give Γ.
  """

  is_adaptive = True
  # Zero factors: the first roots are those of ``ĝ_0ĝ_0ᵀ + εI``.
  starts_from_first_gradient = True

  def __init__(self, decay, epsilon, update_interval, max_dim=1024,
               block_size=None, roots='eigh', eigenbasis=True):
    self.decay = decay
    self.epsilon = epsilon
    self.update_interval = update_interval
    self.max_dim = max_dim
    self.block_size = block_size
    self.roots = validation.check_choice('roots', roots, ROOT_METHODS)
    self.eigenbasis = eigenbasis  # Keep what Γ differentiates the roots at.

  def check_gamma(self, gamma):
    if gamma != 'none' and self.roots == 'newton':
      raise ValueError(
          'gamma=%r needs the eigenvectors of the Kronecker factors (Γ '
          'differentiates their roots), which roots=\'newton\' does not '
          'compute. Pass roots=\'eigh\', or gamma=\'none\'.' % (gamma,))

  def for_gamma(self, gamma):
    self.check_gamma(gamma)
    if gamma != 'none' or not self.eigenbasis:
      return self
    without = copy.copy(self)
    without.eigenbasis = False
    return without

  # -- blocks ---------------------------------------------------------------
  def block_layout(self, event_shape):
    """``[(number of blocks, block length)]`` per axis of `event_shape`."""
    out = []
    for n in (int(n) for n in event_shape):
      if self.block_size is None or n <= self.block_size:
        out.append((1, n))
      else:
        b = max(d for d in range(1, self.block_size + 1) if n % d == 0)
        out.append((n // b, b))
    return out

  def factor_sizes(self, event_shape):
    """Widths of the full (non-diagonal) factors of a part of `event_shape`."""
    return [b for _, b in self.block_layout(event_shape)
            if 1 < b <= self.max_dim]

  def _to_blocks(self, x, batch_ndims, iid=False):
    """``(x', batch_ndims')``: `x` with its blocks along new chain-side axes.

    ``x'[..., j_1, ..., j_d, :, ..., :]`` is block ``(j_1, ..., j_d)``; the
    block axes join the chain axes, so every block is its own tensor. `x`
    itself if no axis is split.

    With `iid`, `x` has independent, identically distributed entries (the
    step's noise ξ), and any fixed arrangement of them into blocks has the
    same law as the true blocks: they are taken in memory order, a reshape
    that moves no data, instead of cut out by a transpose.
    """
    layout = self.block_layout(x.shape[batch_ndims:])
    if all(k == 1 for k, _ in layout):
      return x, batch_ndims
    d = len(layout)
    if iid:
      shape = [k for k, _ in layout] + [b for _, b in layout]
      return tensors.reshape_event(x, batch_ndims, shape), batch_ndims + d
    x = tensors.reshape_event(x, batch_ndims, [v for kb in layout for v in kb])
    perm = (list(range(batch_ndims)) +
            [batch_ndims + 2 * i for i in range(d)] +
            [batch_ndims + 2 * i + 1 for i in range(d)])
    return tf.transpose(x, perm), batch_ndims + d

  def _from_blocks(self, x, like, batch_ndims):
    """Inverse of `_to_blocks` for a tensor shaped like `like`."""
    layout = self.block_layout(like.shape[batch_ndims:])
    if all(k == 1 for k, _ in layout):
      return x
    d = len(layout)
    perm = list(range(batch_ndims))
    for i in range(d):
      perm += [batch_ndims + i, batch_ndims + d + i]
    return tensors.reshape_event(tf.transpose(x, perm), batch_ndims,
                                 like.shape[batch_ndims:], like=like)

  # -- layout of one part ---------------------------------------------------
  def _modes(self, part, batch_ndims):
    """[(size, dense?)] per mode; a scalar part has one diagonal mode."""
    shape = [int(n) for n in part.shape[batch_ndims:]]
    if not shape:
      return [(1, False)]
    return [(n, 1 < n <= self.max_dim) for n in shape]

  def _power(self, part, batch_ndims):
    return -1. / (2. * max(len(part.shape) - batch_ndims, 1))

  # -- statistics -----------------------------------------------------------
  def _statistic(self, g, i, dense, batch_ndims):
    d = len(g.shape) - batch_ndims
    if d == 0:
      return tf.square(g)
    s = _LETTERS[:d]
    if dense:
      t = s[:i] + 'z' + s[i + 1:]
      return tf.einsum('...%s,...%s->...%sz' % (s, t, s[i]), g, g)
    axes = [batch_ndims + k for k in range(d) if k != i]
    return tf.reduce_sum(tf.square(g), axis=axes) if axes else tf.square(g)

  def _roots(self, factor, dense, power):
    """Cached (root, sqrt_root, eigvecs, divdiff) of ``factor + εI``."""
    eps = tf.constant(self.epsilon, tf.float64)
    h = tf.cast(tf.stop_gradient(factor), tf.float64)
    # A non-finite statistic (the step will be rejected by the nonfinite
    # policy) must not reach eigh, which raises outside XLA.
    h = tf.where(tf.math.is_finite(h), h, tf.zeros_like(h))
    dtype = factor.dtype
    if not dense:
      lam = tf.maximum(h + eps, eps)
      out = (lam ** power, lam ** (power / 2.), (),
             power * lam ** (power - 1.))
      return tuple(tf.cast(x, dtype) if not isinstance(x, tuple) else x
                   for x in out)
    n = int(factor.shape[-1])
    if self.roots == 'newton':
      p = int(round(-2. / power))  # sqrt_root = (H + εI)^{-1/p}.
      s, _ = roots_lib.inverse_root(h + eps * tf.eye(n, dtype=tf.float64), p)
      return tf.cast(tf.matmul(s, s), dtype), tf.cast(s, dtype), (), ()
    lam, u = tf.linalg.eigh(h + eps * tf.eye(n, dtype=tf.float64))
    lam = tf.maximum(lam, eps)

    def fn(q):
      return tf.matmul(u * (lam ** q)[..., tf.newaxis, :], u, transpose_b=True)
    if not self.eigenbasis:
      return tf.cast(fn(power), dtype), tf.cast(fn(power / 2.), dtype), (), ()
    li, lj = lam[..., :, tf.newaxis], lam[..., tf.newaxis, :]
    diff = li - lj
    close = tf.abs(diff) <= 1e-9 * tf.maximum(li, lj)
    safe = tf.where(close, tf.ones_like(diff), diff)
    divdiff = tf.where(close, power * li ** (power - 1.),
                       (li ** power - lj ** power) / safe)
    return tuple(tf.cast(x, dtype) for x in (fn(power), fn(power / 2.), u, divdiff))

  def _mode_states(self, factors, part, batch_ndims):
    power = self._power(part, batch_ndims)
    return [ShampooModeState(f, *self._roots(f, dense, power))
            for f, (_, dense) in zip(factors, self._modes(part, batch_ndims))]

  def init(self, params, batch_ndims):
    state = []
    for p in params:
      p, batch_ndims_p = self._to_blocks(p, batch_ndims)
      state.append(self._init_part(p, batch_ndims_p))
    return state

  def _init_part(self, p, batch_ndims):
    """Zero factors of one (blocked) part, with their roots."""
    batch = tf.shape(p)[:batch_ndims]
    factors = []
    for n, dense in self._modes(p, batch_ndims):
      if len(p.shape) == batch_ndims:
        shape = batch
      else:
        shape = tf.concat([batch, [n, n] if dense else [n]], axis=0)
      factors.append(tf.zeros(shape, p.dtype))
    return self._mode_states(factors, p, batch_ndims)

  def _matrix_column_statistic(self, g, batch_ndims):
    """A split matrix's column factors' statistic, from its unsplit layout.

    ``R[j, k] = Σ_a g[j, a, k, :]ᵀ g[j, a, k, :]`` for blocks ``(j, k)``,
    with `g` only reshaped to ``(row blocks, rows, column blocks, columns)``.
    On the blocked layout this product contracts the blocks' first axis,
    which XLA's CPU backend runs at about half the rate of the rows'
    statistic; from this layout, at about the rows' rate. Equal to
    `_statistic` on the blocks up to the order of the sums.
    """
    (kr, br), (kc, bc) = self.block_layout(g.shape[batch_ndims:])
    x = tensors.reshape_event(g, batch_ndims, [kr, br, kc, bc])
    return tf.einsum('...jakb,...jakz->...jkbz', x, x)

  def update(self, state, grads, step, batch_ndims):
    decay = self.decay_at(step, grads[0].dtype)
    blocked = [self._to_blocks(g, batch_ndims) for g in grads]
    statistics = []
    for grad, (g, nb) in zip(grads, blocked):
      split_matrix = nb == batch_ndims + 2  # A matrix cut into blocks.
      statistics.append([
          self._matrix_column_statistic(grad, batch_ndims)
          if split_matrix and i == 1 and dense else
          self._statistic(g, i, dense, nb)
          for i, (_, dense) in enumerate(self._modes(g, nb))])

    def moving_averages():
      return [preconditioner_base.ema(decay, [m.factor for m in modes], s)
              for modes, s in zip(state, statistics)]
    new_state = moving_averages()

    def kept():
      return [[tuple(m)[1:] for m in modes] for modes in state]

    def refreshed():
      # The refresh takes its own moving averages (the same sums): a
      # `tf.cond` would otherwise hold `new_state` as an operand, which
      # XLA then writes out every step instead of fusing it into the
      # caller's select of the new state.
      factors = new_state if self.update_interval == 1 else moving_averages()
      new = [[tuple(m)[1:] for m in self._mode_states(f, g, nb)]
             for f, (g, nb) in zip(factors, blocked)]
      if self.update_interval == 1:
        return new
      # A chain whose factors are not finite (its step will be rejected)
      # keeps its roots: callers may then write the roots back whatever
      # the step's fate.
      finite = (tensors.finite_state(factors, batch_ndims) &
                tensors.finite_state(new, batch_ndims))
      return tensors.where_chains(finite, new, kept(), batch_ndims)
    # Only the cached leaves go through `cond`; the factors stay outside it,
    # live (differentiable).
    cached = (refreshed() if self.update_interval == 1 else
              tf.cond(self.refreshes(step), refreshed, kept))
    return [[ShampooModeState(f, *c) for f, c in zip(fs, cs)]
            for fs, cs in zip(new_state, cached)]

  def state_is_finite(self, state, grads, batch_ndims):
    """Per chain: finite new state, read from the gradient's squares.

    The factors are finite when ``Σ g²`` is
    (`preconditioner_base.squares_finite`); the roots, which change only at
    refresh steps, are checked there (`update`). A step then reads the
    gradient instead of the factors and roots, several times its size for
    blocked matrices. With roots refreshed every step, every leaf is read.
    """
    if self.update_interval == 1:
      return tensors.finite_state(state, batch_ndims)
    return preconditioner_base.squares_finite(grads, batch_ndims)

  def cached_leaves(self, state):
    """The roots (and what Γ keeps with them), unless refreshed every step."""
    cached = self.update_interval != 1
    mark = lambda x, flag: tf.nest.map_structure(lambda _: flag, x)
    return [[ShampooModeState(mark(m.factor, False),
                              *[mark(x, cached) for x in m[1:]])
             for m in modes] for modes in state]

  # -- application ----------------------------------------------------------
  def _contract(self, x, mat, i, dense, batch_ndims):
    d = len(x.shape) - batch_ndims
    if d == 0:
      return mat * x
    if dense:
      s = _LETTERS[:d]
      t = s[:i] + 'z' + s[i + 1:]
      if i == d - 1:
        return tf.einsum('...%s,...%sz->...%s' % (s, s[i], t), x, mat)
      # `mat` is symmetric (a function of a symmetric factor, and so is its
      # tangent for Γ), so ``Σ_a x[..a..] mat[a, z]`` is taken as
      # ``Σ_a mat[z, a] x[..a..]``: a product over the matrix's last axis,
      # which XLA's CPU backend runs about twice as fast as one over its
      # first.
      return tf.einsum('...z%s,...%s->...%s' % (s[i], s, t), mat, x)
    batch = tf.shape(mat)[:batch_ndims]
    shape = tf.concat([batch, [1] * i, [-1], [1] * (d - i - 1)], axis=0)
    return x * tf.reshape(mat, shape)

  def _root_tangent(self, m, dense, power, sqrt=False):
    """Zero-valued term whose derivative is d(root) at the cached eigenbasis.

    With `sqrt`, d of the square root ``(H + εI)^{p/2}``: its divided
    differences are ``F_ij / (s_i + s_j)`` with ``s = λ^{p/2}``, and
    ``λ^{p-1} = F_ii / p`` gives ``s`` from the cached ``F`` alone.
    """
    delta = m.factor - tf.stop_gradient(m.factor)
    divdiff = m.divdiff
    if not dense:
      if sqrt:
        divdiff = divdiff / (2. * m.sqrt_root)
      return divdiff * delta
    if sqrt:
      diagonal = tf.linalg.diag_part(divdiff) / power
      s = diagonal ** (power / (2. * (power - 1.)))
      divdiff = divdiff / (s[..., :, tf.newaxis] + s[..., tf.newaxis, :])
    u = m.eigvecs
    inner = tf.matmul(tf.matmul(u, delta, transpose_a=True), u)
    return tf.matmul(tf.matmul(u, divdiff * inner), u, transpose_b=True)

  def _apply(self, state, vectors, batch_ndims, field, differentiable=False,
             iid=False):
    out = []
    for modes, v in zip(state, vectors):
      x, nb = self._to_blocks(v, batch_ndims, iid)
      power = self._power(x, nb)
      for i, (m, (_, dense)) in enumerate(zip(modes, self._modes(x, nb))):
        mat = getattr(m, field)
        if differentiable:
          mat = mat + self._root_tangent(m, dense, power,
                                         field == 'sqrt_root')
        x = self._contract(x, mat, i, dense, nb)
      out.append(self._from_blocks(x, v, batch_ndims))
    return out

  def apply(self, state, vectors, batch_ndims, differentiable=False):
    return self._apply(state, vectors, batch_ndims, 'root', differentiable)

  def apply_sqrt(self, state, vectors, batch_ndims, differentiable=False):
    return self._apply(state, vectors, batch_ndims, 'sqrt_root',
                       differentiable)

  def apply_sqrt_to_noise(self, state, noise, batch_ndims):
    """``M^{1/2} ξ`` in law: blocks of the noise taken in memory order.

    Under XLA, a transpose into blocks fuses with the draw of ξ into one
    strided loop that runs at a fraction of the draw's own speed; the
    reshape of `_to_blocks` with ``iid=True`` leaves the draw as it is.
    """
    return self._apply(state, noise, batch_ndims, 'sqrt_root', iid=True)
