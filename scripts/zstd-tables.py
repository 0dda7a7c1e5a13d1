#!/usr/bin/env python3
"""What zstd's tables cost a sampled recording's bytes: re-codes a sampled
(format 13, streamed) recording's records frames, flushed a frame at a time as
`RecordingWriter` does, at level 3 with its own tables and with smaller ones.

    pip install zstandard
    python3 scripts/zstd-tables.py target/bench/disk-sessions-sampled.lsrec

(`cargo xtask bench` leaves that recording there: a minute of session churn at
30 sessions/s.) Prints the bytes each choice writes.
"""
import struct
import sys

import zstandard as z


def frames(path):
    data = open(path, "rb").read()
    at = 12  # magic (8) and format version (4)
    while at + 8 <= len(data):
        length, _crc = struct.unpack_from("<II", data, at)
        at += 8
        yield data[at : at + length]
        at += length


def main(path):
    records = list(frames(path))[1:]  # the header's frame is not compressed
    decoder = z.ZstdDecompressor().decompressobj()
    plain = [decoder.decompress(frame) for frame in records]
    print(f"{len(plain)} frames, {sum(map(len, plain))} bytes of records")
    for label, params in [
        ("level 1", z.ZstdCompressionParameters.from_level(1)),
        ("level 3 (hash 17, chain 16 bits)", z.ZstdCompressionParameters.from_level(3)),
        ("level 3, hash 16, chain 15", z.ZstdCompressionParameters.from_level(3, hash_log=16, chain_log=15)),
        ("level 3, hash 14, chain 13", z.ZstdCompressionParameters.from_level(3, hash_log=14, chain_log=13)),
    ]:
        encoder = z.ZstdCompressor(compression_params=params).compressobj()
        written = 0
        for frame in plain:
            written += len(encoder.compress(frame))
            written += len(encoder.flush(z.COMPRESSOBJ_FLUSH_BLOCK))
        print(f"{label}: {written} bytes")


if __name__ == "__main__":
    main(sys.argv[1])
