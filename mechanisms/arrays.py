"""NumPy array types used in the annotations of `mechanisms` (typing only, no behaviour)."""

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
AnyArray = npt.NDArray[Any]  # arrays whose dtype depends on the data (column values, labels)
