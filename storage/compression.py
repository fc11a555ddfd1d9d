"""Body compression codecs, numbered as Kafka numbers them (attributes bits 0-2).

The whole msgpack body of a batch is compressed as one block, so the cost is paid once per
batch, never per record. Snappy uses the raw block format (no xerial framing): our batches
are not Kafka's wire format, and the raw block is smaller and faster.

Pure: no I/O.
"""

from __future__ import annotations

import enum
import zlib

import cramjam
import lz4.frame
import zstandard

from storage.errors import CorruptRecordError


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | Compression) -> Compression:
        """``"zstd"``, ``"ZSTD"``, ``4`` or ``Compression.ZSTD`` -> ``Compression.ZSTD``."""
        if isinstance(name, Compression):
            return name
        if isinstance(name, int):
            return cls(name)
        try:
            return cls[name.strip().upper()]
        except KeyError:
            valid = ", ".join(c.name.lower() for c in cls)
            raise ValueError(f"unknown compression {name!r}; expected one of {valid}") from None


CODEC_MASK = 0x07

_ZSTD_C = zstandard.ZstdCompressor(level=3)
_ZSTD_D = zstandard.ZstdDecompressor()


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        # wbits=31: gzip container, as Kafka's gzip codec uses.
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        return bytes(lz4.frame.compress(data))
    if codec == Compression.ZSTD:
        return bytes(_ZSTD_C.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a body; any codec failure is a ``CorruptRecordError``."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return zlib.decompress(data, 31)
        if codec == Compression.SNAPPY:
            return bytes(cramjam.snappy.decompress_raw(bytes(data)))
        if codec == Compression.LZ4:
            return bytes(lz4.frame.decompress(data))
        if codec == Compression.ZSTD:
            # Frames written by ZstdCompressor.compress carry their content size.
            return bytes(_ZSTD_D.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as e:  # each library raises its own error type
        raise CorruptRecordError(f"body does not decompress with {Compression(codec).name}: {e}") from e
    raise CorruptRecordError(f"unknown compression codec {codec}")
