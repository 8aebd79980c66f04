from __future__ import annotations

import flatbuffers
import numpy as np

import typing
from typing import cast

uoffset: typing.TypeAlias = flatbuffers.number_types.UOffsetTFlags.py_type

class ValueEncoding(object):
  F32 = cast(int, ...)
  F16 = cast(int, ...)
  BF16 = cast(int, ...)
  Q8 = cast(int, ...)

