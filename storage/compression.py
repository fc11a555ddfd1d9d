"""Body compression codecs, numbered as Kafka numbers them (attributes bits 0-2).

The whole msgpack body of a batch is compressed as one block, so the cost is paid once per
batch, never per record. Snappy uses the raw block format (no xerial framing): our batches
are not Kafka's wire format, and the raw block is smaller and faster.

Kafka's batches (magic 2, ``kafka=True``) are read as Kafka's clients write them: snappy
either xerial-framed (snappy-java's ``SnappyOutputStream``, what the Java client writes) or a
raw block (what librdkafka writes; snappy-java's reader takes both, so Kafka does too), and
zstd frames that may not carry their content size (zstd-jni's and librdkafka's streaming
compressors leave it out). When Longboat writes a Kafka batch (compaction, serving a msgpack
batch to a Kafka client) it writes what the Java client would: xerial-framed snappy, and
LZ4 frames with independent blocks and no content size or checksum
(``KafkaLZ4BlockOutputStream``).

Pure: no I/O.
"""

from __future__ import annotations

import enum
import struct
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


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with 1
_XERIAL_BLOCK_BYTES = 32 * 1024  # snappy-java's default block size
_I32 = struct.Struct(">i")


def _xerial_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    for i in range(0, len(data), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK_BYTES]))
        out.append(_I32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_kafka_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = []
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("xerial snappy block length cut short")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError(f"xerial snappy block of {n} bytes runs past the body")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)


def compress(codec: Compression, data: bytes, *, kafka: bool = False) -> bytes:
    """``data`` compressed with ``codec``; ``kafka`` for a Kafka batch (module docstring)."""
    if kafka and codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if kafka and codec == Compression.LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
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


def decompress(codec: int, data: bytes | memoryview, *, kafka: bool = False) -> bytes:
    """Decompress a body; any codec failure is a ``CorruptRecordError``. ``kafka``: a Kafka
    client's batch (module docstring)."""
    try:
        if kafka and codec == Compression.SNAPPY:
            return _snappy_kafka_decompress(bytes(data))
        if kafka and codec == Compression.ZSTD:
            with _ZSTD_D.stream_reader(bytes(data), read_across_frames=True) as r:
                return bytes(r.readall())
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
        raise CorruptRecordError(
            f"body does not decompress with {Compression(codec).name}: {e}"
        ) from e
    raise CorruptRecordError(f"unknown compression codec {codec}")
