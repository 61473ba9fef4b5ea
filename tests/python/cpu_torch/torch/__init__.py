"""A stand-in for a CPU-only torch, for NIXL's Python API before 1.4.

NIXL 1.0 to 1.3 import torch unconditionally (`nixl_cuXX._api`: `import
torch`, `isinstance(descs, torch.Tensor)`; the `nixl` meta package of 1.1
and 1.3: `from torch.version import cuda`). The release matrix
(tests/interposer/releases.rs) runs tests/programs/python/nixl_plain.py,
which passes NIXL lists of tuples, never tensors, on those releases with
this folder on PYTHONPATH instead of a real torch: the names NIXL touches,
as a CPU-only torch has them, and nothing else.
"""

from . import version


class Tensor:
    """No object of the program is one: NIXL's `isinstance` checks say no."""
