"""torch.Tensor: the C tensor, with the methods PyTorch writes in Python here too."""

from . import _C


class Tensor(_C.TensorBase):
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """As torch/_tensor.py: through torch.autograd.backward to the engine."""
        from . import autograd

        autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)
