"""A SHA-256 whose running state can be saved and restored: what lets a seal after a resume skip the history.

A seal is the sha256 of every byte of the trace before it (_seal.py).
hashlib cannot hand its state to another process, so the index (_index.py)
keeps the trace's running hash at its mark with this one: libcrypto's
SHA256_Init/Update/Final through ctypes, the state being the SHA256_CTX's
bytes. The library is opened by name (no helper process is started: the
trace is locked while this runs) and used only if a state saved mid-way and
restored gives hashlib's digest; otherwise `available()` is False and the
seal hashes the file from its first byte, as it always may.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

_CTX = 112  # sizeof(SHA256_CTX): h[8], Nl, Nh, data[16], num, md_len (32-bit words)
_NAMES = ("libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so", "libcrypto.3.dylib", "libcrypto.dylib")
_lib: Any = None
_checked = False


def available() -> bool:
    """Whether a resumable SHA-256 is there (libcrypto found and self-tested), loading it on first call."""
    global _lib, _checked
    if not _checked:
        _checked = True
        _lib = _load()
    return _lib is not None


def _load() -> Any:
    for name in _NAMES:
        try:
            lib = ctypes.CDLL(name)
            for fn in ("SHA256_Init", "SHA256_Update", "SHA256_Final"):
                getattr(lib, fn).restype = ctypes.c_int
            lib.SHA256_Init.argtypes = [ctypes.c_void_p]
            lib.SHA256_Update.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
            lib.SHA256_Final.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        except (OSError, AttributeError):
            continue
        if _works(lib):
            return lib
    return None


def _works(lib: Any) -> bool:
    a, b = bytes(range(256)) * 5 + b"x", b"the rest" * 100
    try:
        h = Sha256(lib=lib)
        h.update(a)
        again = Sha256(h.state(), lib=lib)
        again.update(b)
        return again.hexdigest() == hashlib.sha256(a + b).hexdigest() and h.hexdigest() == hashlib.sha256(a).hexdigest()
    except (OSError, ValueError, ctypes.ArgumentError):
        return False


class Sha256:
    """hashlib.sha256's update/copy/hexdigest, plus state() and Sha256(state) to carry it between processes."""

    __slots__ = ("_ctx", "_lib")

    def __init__(self, state: bytes | None = None, *, lib: Any = None):
        self._lib = lib if lib is not None else _lib
        if self._lib is None:
            raise ValueError("no resumable SHA-256 here (see available())")
        self._ctx = ctypes.create_string_buffer(_CTX + 16)  # room to spare: the library writes its own struct
        if state is None:
            if self._lib.SHA256_Init(self._ctx) != 1:
                raise ValueError("SHA256_Init failed")
        else:
            if len(state) != _CTX:
                raise ValueError(f"a SHA-256 state is {_CTX} bytes, not {len(state)}")
            ctypes.memmove(self._ctx, state, _CTX)

    def update(self, data: bytes) -> None:
        if self._lib.SHA256_Update(self._ctx, data, len(data)) != 1:
            raise ValueError("SHA256_Update failed")

    def state(self) -> bytes:
        return self._ctx.raw[:_CTX]

    def copy(self) -> Sha256:
        return Sha256(self.state(), lib=self._lib)

    def hexdigest(self) -> str:
        done = self.copy()
        md = ctypes.create_string_buffer(32)
        if self._lib.SHA256_Final(md, done._ctx) != 1:
            raise ValueError("SHA256_Final failed")
        return md.raw.hex()
