"""Upload body as sent → decompressed JSON bytes, or the 415/413/400 the contract names.

Order follows the limit precedence in DESIGN.md: media type and coding (415), size as sent (413), then the
decompression limits (413: decompressed size, then ratio), checked while inflating so that a gzip bomb is
stopped after at most one chunk beyond the allowance and is never inflated in full.
"""

import zlib

from contracts.errors import BadRequest, LimitExceeded, UnsupportedMediaType
from contracts.formats import json_media_type_problem
from contracts.limits import MAX_COMPRESSION_RATIO, MAX_DECOMPRESSED_BYTES, MAX_REQUEST_BYTES

_INPUT_BYTES = 1 << 16
_OUTPUT_BYTES = 1 << 20
_GZIP_WBITS = 16 + zlib.MAX_WBITS


def decompress_body(body: bytes, content_type: str | None, content_encoding: str | None) -> bytes:
    gzipped = check_media_type(content_type, content_encoding)
    if len(body) > MAX_REQUEST_BYTES:
        raise LimitExceeded("maxRequestBytes", MAX_REQUEST_BYTES, len(body))
    if not gzipped:
        _check_inflation(len(body), len(body))
        return body
    return _gunzip(body)


def check_media_type(content_type: str | None, content_encoding: str | None) -> bool:
    """415 unless the body is JSON in UTF-8, sent as is or gzipped; True when gzipped. Needs only the headers."""
    if problem := json_media_type_problem(content_type):
        raise UnsupportedMediaType(problem)
    coding = (content_encoding or "identity").strip().lower()
    if coding in ("gzip", "x-gzip"):  # RFC 9110 §8.4.1.3: x-gzip is gzip
        return True
    if coding != "identity":
        raise UnsupportedMediaType(f"Content-Encoding must be gzip or absent, not {content_encoding}.")
    return False


def _check_inflation(produced: int, sent: int) -> None:
    if produced > MAX_DECOMPRESSED_BYTES:
        raise LimitExceeded("maxDecompressedBytes", MAX_DECOMPRESSED_BYTES, produced)
    if produced > MAX_COMPRESSION_RATIO * sent:
        raise LimitExceeded("maxCompressionRatio", MAX_COMPRESSION_RATIO, -(-produced // sent))


def _gunzip(body: bytes) -> bytes:
    # Bounded steps both ways: input in slices (zlib copies what it has not consumed yet) and never more output
    # than one byte past the allowance, so memory stays within the limits whatever the body holds.
    allowance = min(MAX_DECOMPRESSED_BYTES, MAX_COMPRESSION_RATIO * len(body))
    view = memoryview(body)
    chunks: list[bytes] = []
    produced, position, pending = 0, 0, b""
    inflater = zlib.decompressobj(wbits=_GZIP_WBITS)
    try:
        while True:
            chunk = inflater.decompress(pending, min(_OUTPUT_BYTES, allowance - produced + 1))
            produced += len(chunk)
            _check_inflation(produced, len(body))
            chunks.append(chunk)
            pending = inflater.unconsumed_tail
            if inflater.eof:
                pending = inflater.unused_data
                if not pending and position == len(body):
                    break
                inflater = zlib.decompressobj(wbits=_GZIP_WBITS)  # concatenated members are one body (RFC 1952)
            elif not pending and not chunk:  # everything given so far is inflated: take the next slice
                if position == len(body):
                    raise BadRequest("The gzip body is truncated.")
                pending = view[position:position + _INPUT_BYTES]
                position += len(pending)
    except zlib.error as error:
        raise BadRequest(f"The body is not valid gzip: {error}.") from None
    return b"".join(chunks)
