"""The snapshot's objects, listed for the host to make immortal (`flowbox_sdk.immortal`)."""

import struct
import sys

from flowbox_sdk import immortal


def test_a_module_global_and_a_code_objects_constant_are_listed_with_their_types():
    listed = immortal.snapshot_objects()
    pairs = set(listed)
    # Reached through sys.modules and the module's dict.
    source = immortal._MARKER_SOURCE
    assert (id(source), id(type(source))) in pairs
    # Only a code object holds its docstring; the collector does not see inside code objects.
    doc = immortal.snapshot_objects.__code__.co_consts[0]
    assert isinstance(doc, str) and " " in doc
    assert (id(doc), id(str)) in pairs
    assert (id(sys.modules), id(dict)) in pairs
    assert listed == sorted(pairs), "sorted, each object once"


def test_objects_immortal_already_are_left_out(monkeypatch):
    monkeypatch.setattr(immortal, "_is_immortal", lambda obj: type(obj) is dict)
    listed = immortal.snapshot_objects()
    assert listed and all(type_address != id(dict) for _, type_address in listed)


def test_the_list_is_the_marker_the_count_and_each_address_with_its_types():
    blob = immortal.encoded([(0x100, 0x200), (0x110, 0x300)])
    marker = bytes(byte ^ immortal._MASK for byte in immortal._MARKER_SOURCE)
    assert bytes(blob[:16]) == marker
    assert struct.unpack_from("<5I", blob, 16) == (2, 0x100, 0x200, 0x110, 0x300)
    assert len(blob) == 16 + 4 + 2 * 8
    # The host's MARKER (host/flowbox/src/runtime/immortal.rs).
    assert marker.hex() == "ae88dffb56b9ed4338a1d41d67ca9f30"


def test_a_64_bit_interpreter_lists_nothing_for_the_host():
    # Natively, where these tests run, an address does not fit the list's 32 bits.
    assert sys.maxsize >= 2**32
    assert immortal.listed_for_host() is None
