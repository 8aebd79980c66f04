"""A drop-in for the part of ``flatbuffers.Builder`` that :func:`delta_fabric.wire.encode_packet` and
the generated ``Entry*`` / ``Packet*`` helpers use, producing the same bytes with far fewer Python
calls.

The pure-Python ``flatbuffers.Builder`` spends about 50 us per Entry table on this project's packets
(per-call range checks, ``Prep``/``Pad``/``Place`` for every scalar); a relay re-encode of a packet of
small entries cost as much as receiving it. This class follows the same algorithm
(back-to-front writing, the same alignment and padding rules, vtable trimming and de-duplication,
``Finish`` with a file identifier), so its output is byte-identical: ``tests/test_fastbuild.py`` checks
it against ``flatbuffers.Builder`` on random packets and on every conformance vector's packet.

Unlike ``flatbuffers.Builder`` it does not range-check the values it writes beyond what
``struct.pack_into`` does (a value that does not fit raises ``struct.error``): ``encode_packet``
checks every integer first. Only the methods below exist; a generated helper that needs another one
fails with ``AttributeError`` (add it here, following ``flatbuffers/builder.py``).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

__all__ = ["FastBuilder"]

_VT_META_FIELDS = 2  # vtable size, object size
_PACK_SOFFSET = struct.Struct("<i").pack_into
_PACK_UOFFSET = struct.Struct("<I").pack_into
_PACK_VOFFSET = struct.Struct("<H").pack_into
_PACK_U64 = struct.Struct("<Q").pack_into
_MAX_BUFFER_SIZE = 2**31


class FastBuilder:
    """Builds one FlatBuffer back to front, like ``flatbuffers.Builder`` (same bytes)."""

    __slots__ = ("buf", "current_vtable", "head", "minalign", "object_end", "vector_len", "vtables")

    def __init__(self, initial_size: int = 1024) -> None:
        if not 0 <= initial_size <= _MAX_BUFFER_SIZE:
            raise ValueError("a FlatBuffer is at most 2 GiB")
        self.buf = bytearray(initial_size)
        self.head = initial_size
        self.minalign = 1
        self.vtables: dict[tuple[int, ...], int] = {}
        self.current_vtable: list[int] = []
        self.object_end = 0
        self.vector_len = 0

    # -- space and alignment ----------------------------------------------------------------------
    def _grow(self, needed: int) -> None:
        old = len(self.buf)
        new = old
        while self.head + (new - old) < needed:
            if new >= _MAX_BUFFER_SIZE:
                raise ValueError("a FlatBuffer is at most 2 GiB")
            new = min(max(new * 2, 1), _MAX_BUFFER_SIZE)
        grown = bytearray(new)
        grown[new - old :] = self.buf
        self.buf = grown
        self.head += new - old

    def Prep(self, size: int, additional_bytes: int) -> None:
        """Align so that ``size`` bytes can be written after ``additional_bytes`` more (zero
        padding; the buffer starts zeroed and every byte is written once)."""
        if size > self.minalign:
            self.minalign = size
        align = (-(len(self.buf) - self.head + additional_bytes)) & (size - 1)
        needed = align + size + additional_bytes
        if self.head < needed:
            self._grow(needed)
        self.head -= align

    def Offset(self) -> int:
        return len(self.buf) - self.head

    # -- scalars in tables ------------------------------------------------------------------------
    def _slot(self, fmt: str, size: int, slot: int, x: Any, default: Any) -> None:
        if x != default:
            self.Prep(size, 0)
            self.head -= size
            struct.pack_into(fmt, self.buf, self.head, x)
            self.current_vtable[slot] = len(self.buf) - self.head

    def PrependBoolSlot(self, slot: int, x: bool, d: bool) -> None:
        self._slot("<?", 1, slot, x, d)

    def PrependUint8Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<B", 1, slot, x, d)

    PrependByteSlot = PrependUint8Slot

    def PrependInt8Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<b", 1, slot, x, d)

    def PrependUint16Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<H", 2, slot, x, d)

    def PrependInt16Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<h", 2, slot, x, d)

    def PrependUint32Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<I", 4, slot, x, d)

    def PrependInt32Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<i", 4, slot, x, d)

    def PrependFloat32Slot(self, slot: int, x: float, d: float) -> None:
        self._slot("<f", 4, slot, x, d)

    def PrependUint64Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<Q", 8, slot, x, d)

    def PrependInt64Slot(self, slot: int, x: int, d: int) -> None:
        self._slot("<q", 8, slot, x, d)

    def PrependFloat64Slot(self, slot: int, x: float, d: float) -> None:
        self._slot("<d", 8, slot, x, d)

    # -- offsets ----------------------------------------------------------------------------------
    def PrependUOffsetTRelative(self, off: int) -> None:
        self.Prep(4, 0)
        cur = len(self.buf) - self.head
        if off > cur:
            raise ValueError("flatbuffers: offset arithmetic error")
        self.head -= 4
        _PACK_UOFFSET(self.buf, self.head, cur - off + 4)

    def PrependUOffsetTRelativeSlot(self, slot: int, x: int, d: int) -> None:
        if x != d:
            self.PrependUOffsetTRelative(x)
            self.current_vtable[slot] = len(self.buf) - self.head

    # -- vectors ----------------------------------------------------------------------------------
    def StartVector(self, elem_size: int, num_elems: int, alignment: int) -> int:
        self.vector_len = num_elems
        self.Prep(4, elem_size * num_elems)
        self.Prep(alignment, elem_size * num_elems)
        return len(self.buf) - self.head

    def EndVector(self) -> int:
        self.head -= 4
        _PACK_UOFFSET(self.buf, self.head, self.vector_len)
        return len(self.buf) - self.head

    def CreateByteVector(self, x: bytes) -> int:
        if not isinstance(x, bytes):
            raise TypeError("non-byte vector passed to CreateByteVector")
        n = len(x)
        self.Prep(4, n)
        self.head -= n
        self.buf[self.head : self.head + n] = x
        self.vector_len = n
        return self.EndVector()

    def CreateNumpyVector(self, x: np.ndarray[Any, Any]) -> int:
        if not isinstance(x, np.ndarray):
            raise TypeError("non-numpy-ndarray passed to CreateNumpyVector")
        if x.dtype.kind not in "biuf":
            raise TypeError("numpy-ndarray holds elements of unsupported datatype")
        if x.ndim > 1:
            raise TypeError("multidimensional-ndarray passed to CreateNumpyVector")
        self.StartVector(x.itemsize, x.size, x.dtype.alignment)
        if x.dtype.str[0] != "<":  # as flatbuffers.Builder does
            x = x.byteswap(inplace=False)
        n = x.nbytes
        self.head -= n
        if n:
            src = x if x.flags.c_contiguous else np.ascontiguousarray(x)
            self.buf[self.head : self.head + n] = src.data.cast("B")
        self.vector_len = x.size
        return self.EndVector()

    # -- tables -----------------------------------------------------------------------------------
    def StartObject(self, num_fields: int) -> None:
        self.current_vtable = [0] * num_fields
        self.object_end = len(self.buf) - self.head

    def EndObject(self) -> int:
        """Write the table's soffset and its vtable, or point at an identical earlier vtable."""
        self.Prep(4, 0)
        self.head -= 4  # the soffset, written below
        object_offset = len(self.buf) - self.head
        fields = self.current_vtable
        last = len(fields)
        while last and fields[last - 1] == 0:  # trailing absent fields are trimmed
            last -= 1
        rel = [object_offset - f if f else 0 for f in fields[:last]]
        object_size = object_offset - self.object_end
        key = (*reversed(rel), object_size)
        found = self.vtables.get(key)
        if found is None:
            vbytes = 2 * (last + _VT_META_FIELDS)
            self.Prep(2, vbytes)  # a no-op: the head is 4-aligned after the soffset
            self.head -= vbytes
            h = self.head
            _PACK_VOFFSET(self.buf, h, vbytes)
            _PACK_VOFFSET(self.buf, h + 2, object_size)
            if last:
                struct.pack_into(f"<{last}H", self.buf, h + 4, *rel)
            vt_offset = len(self.buf) - h
            _PACK_SOFFSET(self.buf, len(self.buf) - object_offset, vt_offset - object_offset)
            self.vtables[key] = vt_offset
        else:
            _PACK_SOFFSET(self.buf, self.head, found - object_offset)
        self.current_vtable = []
        return object_offset

    # -- one whole Entry table (schema 1.0/1.1 fields 0..6) -----------------------------------------
    def entry_v1(
        self,
        origin: int,
        incarnation: int,
        seq: int,
        hops: int,
        indices: np.ndarray[Any, Any],
        values: np.ndarray[Any, Any],
        values_slot: int,
    ) -> int:
        """The Entry table that these generated-helper calls build, in one method:
        ``CreateNumpyVector(indices)``, ``CreateNumpyVector(values)``, ``EntryStart``,
        ``EntryAddOrigin/Incarnation/Seq/Hops``, ``EntryAddIndices``, then ``EntryAddValues``
        (``values_slot`` 5) or ``EntryAddValues16`` (6), ``EntryEnd``. ``indices`` are C-contiguous
        little-endian u32 and ``values`` C-contiguous little-endian 4- or 2-byte values (the caller
        guarantees it); the scalars are in range. Returns the table's offset, as ``EntryEnd``."""
        buf = self.buf
        size = len(buf)
        ni, nv = indices.nbytes, values.nbytes
        # a bound on what this entry adds: vectors (lengths, padding), table (soffset, 3 u64, hops,
        # 2 uoffsets, padding), vtable (<= 18 bytes)
        need = ni + nv + 128
        if self.head < need:
            self._grow(need)
            buf = self.buf
            size = len(buf)
        if self.minalign < 4:
            self.minalign = 4
        h = self.head
        # indices vector: Prep(4, ni) pads to 4, then the data and the u32 length
        h -= (h - size) & 3  # == (-(size - h)) & 3 (0 when aligned)
        h -= ni
        if ni:
            buf[h : h + ni] = indices.data.cast("B")
        h -= 4
        _PACK_UOFFSET(buf, h, indices.size)
        idx_off = size - h
        # values vector: Prep(4, nv) then Prep(esize, nv) (a no-op)
        h -= (h - size - nv) & 3
        h -= nv
        if nv:
            buf[h : h + nv] = values.data.cast("B")
        h -= 4
        _PACK_UOFFSET(buf, h, values.size)
        val_off = size - h
        # the table, back to front: scalars in call order, then the two uoffsets
        object_end = size - h
        slots = [0, 0, 0, 0, 0, 0, 0]
        for slot, x in ((0, origin), (1, incarnation), (2, seq)):
            if x:
                self.minalign = 8
                h -= (h - size) & 7
                h -= 8
                _PACK_U64(buf, h, x)
                slots[slot] = size - h
        if hops:
            h -= 1
            buf[h] = hops
            slots[3] = size - h
        h -= (h - size) & 3
        h -= 4
        _PACK_UOFFSET(buf, h, size - h - idx_off)
        slots[4] = size - h
        h -= 4  # already aligned
        _PACK_UOFFSET(buf, h, size - h - val_off)
        slots[values_slot] = size - h
        # EndObject: the soffset, then the vtable (or an identical earlier one)
        h -= 4
        object_offset = size - h
        last = values_slot + 1  # the values slot is the last one present
        rel = [object_offset - f if f else 0 for f in slots[:last]]
        object_size = object_offset - object_end
        key = (*reversed(rel), object_size)
        found = self.vtables.get(key)
        if found is None:
            vbytes = 2 * (last + _VT_META_FIELDS)
            h -= vbytes
            _PACK_VOFFSET(buf, h, vbytes)
            _PACK_VOFFSET(buf, h + 2, object_size)
            struct.pack_into(f"<{last}H", buf, h + 4, *rel)
            vt_offset = size - h
            _PACK_SOFFSET(buf, size - object_offset, vt_offset - object_offset)
            self.vtables[key] = vt_offset
        else:
            _PACK_SOFFSET(buf, h, found - object_offset)
        self.head = h
        return object_offset

    def uoffset_vector(self, offsets: list[int]) -> int:
        """``StartVector(4, n, 4)``, ``PrependUOffsetTRelative`` of ``offsets`` last to first,
        ``EndVector()``: a vector of tables, in one method."""
        n = len(offsets)
        self.StartVector(4, n, 4)
        base = len(self.buf) - self.head  # each prepend adds 4 bytes, no padding (aligned)
        if n:
            h = self.head - 4 * n
            vals = [base + 4 * (n - i) - off for i, off in enumerate(offsets)]
            if min(vals) < 4:
                raise ValueError("flatbuffers: offset arithmetic error")
            struct.pack_into(f"<{n}I", self.buf, h, *vals)
            self.head = h
        return self.EndVector()

    # -- finishing --------------------------------------------------------------------------------
    def Finish(self, root_table: int, file_identifier: bytes | None = None) -> int:
        self.Prep(self.minalign, 8 if file_identifier is not None else 4)
        if file_identifier is not None:
            if len(file_identifier) != 4:
                raise ValueError("a file identifier has 4 bytes")
            self.Prep(4, 4)
            self.head -= 4
            self.buf[self.head : self.head + 4] = file_identifier
        self.PrependUOffsetTRelative(root_table)
        return self.head

    def Output(self) -> memoryview:
        return memoryview(self.buf)[self.head :]
