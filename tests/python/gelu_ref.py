"""The tanh GELU and its derivative in float64 numpy: the references the
epilogue tests (numpy and JAX) check the library's GELU, DGELU and their bias
gradients against (commgemm.h "Epilogues")."""

import numpy as np

_C = np.sqrt(2 / np.pi)


def gelu(t):
    return 0.5 * t * (1 + np.tanh(_C * (t + 0.044715 * t ** 3)))


def dgelu(t):
    th = np.tanh(_C * (t + 0.044715 * t ** 3))
    return 0.5 * (1 + th) + 0.5 * t * (1 - th ** 2) * _C * (1 + 3 * 0.044715 * t ** 2)
