"""The objects the snapshot holds, listed for the host to make immortal.

Every instance starts from the snapshot's memory, and a run of CPython writes to an object
whenever it takes or drops a reference to it: its reference count. Those writes land on the
pages of types, functions, module dicts and constants all over the snapshot's heap, so each run
copies those pages from the memory image (and, from the warm pool, meets them cold in its
caches). CPython skips the count of an immortal object, one whose count is at least 2**30 on a
32-bit build such as this one, and never frees it. An instance serves one run and is dropped, so
nothing of the snapshot needs freeing: the host sets the count of every object listed here to
CPython's immortal value in the memory image it compiles (`runtime::immortal`), and no run
writes a count of the snapshot again. Every instance, pooled or not, still starts from the
same memory, so a run's fuel stays the same whether it is the first or the thousandth.

The list is found by its marker in the memory image: 16 bytes, then the number of objects,
then for each its address and the address of its type (little-endian u32s). The host sets the
count only where it finds the type where the object's type should be and a count below every
address of the image, so an object freed after it was listed (its memory a free block, a link
of its type's free list, or another object's) is left alone. The marker itself
is written byte by byte into the list, so that the memory holds it nowhere else.
"""

import gc
import struct
import sys

# The marker is these bytes, each XORed with MASK (the host's `MARKER`).
_MARKER_SOURCE = bytes.fromhex("0b2d7a5ef31c48e69d0471b8c26f3a95")
_MASK = 0xA5

# The objects CPython made immortal already (static types, small ints, interned strings).
_is_immortal = getattr(sys, "_is_immortal", lambda obj: False)


def listed_for_host() -> bytearray | None:
    """The list the host reads, on the guest's 32-bit interpreter; None on a 64-bit one (the
    SDK's tests on native CPython), whose addresses the list cannot hold and whose memory no
    host reads."""
    if sys.maxsize >= 2**32:
        return None
    return encoded(snapshot_objects())


def snapshot_objects() -> list:
    """Every object reachable from the loaded modules, but those immortal already, as sorted
    pairs of its address and its type's: what each refers to as the cyclic collector sees it,
    and the objects a code object holds, which the collector does not see. Not every object
    the collector tracks: those only the import machinery's frames hold now are freed before
    the snapshot."""
    pending = [sys.modules]
    seen = {id(pending)}
    listed = []
    code = type(snapshot_objects.__code__)
    while pending:
        obj = pending.pop()
        address = id(obj)
        if address in seen:
            continue
        seen.add(address)
        if not _is_immortal(obj):
            listed.append((address, id(type(obj))))
        if type(obj) is code:
            pending.extend(obj.co_consts)
            pending.extend(obj.co_names)
            pending.extend(obj.co_varnames)
            pending.extend(obj.co_cellvars)
            pending.extend(obj.co_freevars)
            pending += (
                obj.co_filename,
                obj.co_name,
                obj.co_qualname,
                obj.co_linetable,
                obj.co_exceptiontable,
            )
        else:
            pending.extend(gc.get_referents(obj))
    listed.sort()
    return listed


def encoded(objects: list) -> bytearray:
    """The list the host reads: the marker, the count, and each object's address with its
    type's (`snapshot_objects`)."""
    blob = bytearray(16 + 4 + 8 * len(objects))
    for index, byte in enumerate(_MARKER_SOURCE):
        blob[index] = byte ^ _MASK
    struct.pack_into("<I", blob, 16, len(objects))
    offset = 20
    for address, type_address in objects:
        struct.pack_into("<II", blob, offset, address, type_address)
        offset += 8
    return blob
