"""Reading the optimizer's in-graph sums once an epoch: their values and their reset in one compiled call."""

import tensorflow as tf

__all__ = ['Reader']


class Reader(object):
  """Reads a fixed list of variables that the steps add to, and sets them back to zero.

  The callbacks read the steps' sums once an epoch; read and assigned one
  by one in eager mode, they cost on epochs of a few steps a sizeable
  share of the steps' own time. One compiled call does it all.

  Args:
    variables: the variables, read in this order.
  """

  def __init__(self, variables):
    self.variables = list(variables)
    self._take = tf.function(self._take_in_graph, autograph=False)

  def _take_in_graph(self):
    values = [tf.identity(v) for v in self.variables]
    with tf.control_dependencies(values):
      for v in self.variables:
        v.assign(tf.zeros_like(v))
    return values

  def take(self):
    """The variables' values (NumPy), each variable then zero."""
    return [v.numpy() for v in self._take()]
