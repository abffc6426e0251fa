"""Per-chain helpers on lists of tensors (leading `batch_ndims` axes are chains)."""

import tensorflow as tf

__all__ = [
    'broadcast_to_part',
    'event_dot',
    'event_dots',
    'event_size',
    'finite_chains',
    'finite_state',
    'part_event_dot',
    'part_event_mean',
    'part_event_sum',
    'reshape_event',
    'where_chains',
]


def part_event_dot(x, y, batch_ndims):
  """Sum of `x * y` over the event axes of one part; shape = batch shape."""
  return part_event_sum(x * y, batch_ndims)


def part_event_mean(x, batch_ndims):
  """Mean of `x` over the event axes of one part; shape = batch shape."""
  if len(x.shape) == batch_ndims:
    return x
  size = x.shape[batch_ndims:].num_elements()
  if size is None:
    size = tf.reduce_prod(tf.shape(x)[batch_ndims:])
  return part_event_sum(x, batch_ndims) / tf.cast(size, x.dtype)


def event_dot(xs, ys, batch_ndims):
  """Inner product over *all* event axes of all parts, one value per chain."""
  return tf.add_n([part_event_dot(x, y, batch_ndims) for x, y in zip(xs, ys)])


def finite_chains(parts, batch_ndims):
  """Per chain: are all entries of all parts finite? (batch-shaped bool)

  Tested through the sum of each chain's entries, which is finite exactly
  when all of them are, except that entries so large (~1e38 / D in float32)
  that their sum overflows also count as non-finite. The sum is one pass of
  `part_event_sum` (a matrix-vector product for large parts), which XLA's
  CPU backend runs faster than its own float reduction or
  ``reduce_all(is_finite(x))``; the check runs every step.
  """
  total = tf.add_n([part_event_sum(p, batch_ndims) for p in parts])
  return tf.math.is_finite(total)


def finite_state(structure, batch_ndims):
  """Per chain: are the floating leaves of `structure` all finite?

  For a sampler's metric state and momentum: each leaf (of rank at least
  `batch_ndims`; bool and integer leaves are skipped) is tested through its
  own sum (`finite_chains`). Statistics that overflow, from a finite
  gradient whose square does not, give a zero metric and a step that
  moves nothing, so no NaN reaches the proposal: they must be checked here.
  """
  ok = True
  for leaf in tf.nest.flatten(structure):
    if leaf.dtype.is_floating and leaf.shape.rank >= batch_ndims:
      ok = ok & finite_chains([leaf], batch_ndims)
  return ok


def reshape_event(x, batch_ndims, event_shape, like=None):
  """`x` reshaped to ``batch + event_shape``, static batch shape kept if known.

  The batch shape is the leading `batch_ndims` axes of `like` (default: `x`
  itself); `event_shape` is a list of ints (one may be -1).
  """
  like = x if like is None else like
  event_shape = [int(n) for n in event_shape]
  batch = like.shape[:batch_ndims]
  if batch.is_fully_defined():
    shape = batch.as_list() + event_shape
  else:
    shape = tf.concat([tf.shape(like)[:batch_ndims], event_shape], axis=0)
  return tf.reshape(x, shape)


def _matvec_row_sums(x, columns):
  """Row sums of `x` seen as a ``[-1, columns]`` matrix (a flat vector)."""
  return tf.linalg.matvec(tf.reshape(x, [-1, columns]),
                          tf.ones([columns], x.dtype))


def part_event_sum(x, batch_ndims):
  """Sum of `x` over the event axes of one part; shape = batch shape.

  A floating part of at least 4096 entries (static event shape) is summed
  as a matrix-vector product with ones, its event seen as a ``[rows,
  columns]`` matrix (`_matvec_columns`), and then over its rows: XLA's CPU
  backend hands that product to its matrix kernels, which sum large parts
  several times faster than its own reduction. Other parts are reduced as the
  minor axis of a ``batch + [1, n]`` reshape (XLA's vectorised row
  reduction). NaN and ±Inf propagate through both.
  """
  event = x.shape[batch_ndims:]
  if not event:
    return x
  columns = _matvec_columns(x, event)
  if columns:
    rows = reshape_event(_matvec_row_sums(x, columns), batch_ndims, [1, -1],
                         like=x)
    return tf.squeeze(tf.reduce_sum(rows, axis=-1), axis=-1)
  return tf.squeeze(tf.reduce_sum(reshape_event(x, batch_ndims, [1, -1]),
                                  axis=-1), axis=-1)


_MATVEC_MIN_SIZE = 4096


def _matvec_columns(x, event):
  """Width of the matrix `part_event_sum` sums `x` as, or `None` (reduce).

  The last event axis when it is at least 64 wide, else (a flat or narrow
  part) the largest divisor of the event size from 1024 down to 64 (narrower
  matrices are no faster than XLA's reduction); `None` for small,
  non-float or dynamically shaped parts and sizes without such a divisor.
  """
  if not event.is_fully_defined() or x.dtype not in (tf.float16, tf.float32,
                                                     tf.float64):
    return None
  size = event.num_elements()
  if size < _MATVEC_MIN_SIZE:
    return None
  if len(event) >= 2 and int(event[-1]) >= 64:
    return int(event[-1])
  for columns in range(1024, 63, -1):
    if size % columns == 0:
      return columns
  return None


def event_dots(pairs, batch_ndims):
  """Several inner products over all event axes, one value per chain each.

  Args:
    pairs: list of ``(xs, ys)``, each a pair of lists of tensors shaped like
      the parameters.
    batch_ndims: number of leading chain axes.

  Returns:
    List of batch-shaped tensors, ``event_dot(xs, ys)`` for each pair. The
    ``k`` products of one part are stacked into ``batch + [k] + event`` and
    summed in one `part_event_sum` (one reduction, or one matrix-vector
    product for large parts), not ``k``.
  """
  totals = []
  for factors in zip(*[zip(xs, ys) for xs, ys in pairs]):
    products = tf.stack([x * y for x, y in factors], axis=batch_ndims)
    totals.append(part_event_sum(products, batch_ndims + 1))
  total = tf.add_n(totals)
  return [total[..., i] for i in range(len(pairs))]


def event_size(parts, batch_ndims):
  """Number of scalar parameters of one chain (static Python int)."""
  total = 0
  for p in parts:
    n = 1
    for d in p.shape[batch_ndims:]:
      n *= int(d)
    total += n
  return total


def broadcast_to_part(c, part, batch_ndims):
  """Reshapes a per-chain tensor `c` (batch shape) to broadcast against `part`."""
  event_rank = len(part.shape) - batch_ndims
  if event_rank == 0:
    return c
  return tf.reshape(c, tf.concat([tf.shape(c), [1] * event_rank], axis=0))


def where_chains(mask, new, old, batch_ndims):
  """Per-chain select over nested structures whose leaves lead with batch axes."""
  def _select(n, o):
    m = mask
    extra = len(n.shape) - batch_ndims
    if extra:
      m = tf.reshape(m, tf.concat([tf.shape(m), [1] * extra], axis=0))
    return tf.where(m, n, o)
  return tf.nest.map_structure(_select, new, old)
