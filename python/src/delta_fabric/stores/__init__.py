"""Weight stores (`delta_fabric.store.WeightStore`) for common frameworks.

* `delta_fabric.stores.numpy.NumpyStore`: named NumPy arrays, updated in place;
* `delta_fabric.stores.torch.TorchStore`: a PyTorch ``nn.Module`` on CPU or CUDA (imports torch, so
  import it from its module).
"""

from __future__ import annotations

from delta_fabric.stores.numpy import NumpyStore

__all__ = ["NumpyStore"]
