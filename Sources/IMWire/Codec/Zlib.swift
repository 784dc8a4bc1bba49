import CZlib
import NIOCore

/// zlib through the system library: CRC-32, bounded inflate and deflate of ByteBuffers.
enum Zlib {
    /// zlib's CRC-32 of the readable bytes; 0 for none.
    static func crc32(_ buffer: ByteBuffer) -> UInt32 {
        buffer.withUnsafeReadableBytes { bytes in
            guard let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
            let pointer = base.assumingMemoryBound(to: Bytef.self)
            return UInt32(truncatingIfNeeded: CZlib.crc32(0, pointer, uInt(bytes.count)))
        }
    }

    /// Compresses the readable bytes into one zlib stream (RFC 1950).
    static func compress(_ input: ByteBuffer, level: Int32) throws(IMWireError) -> ByteBuffer {
        let sourceLength = uLong(input.readableBytes)
        let bound = Int(compressBound(sourceLength))
        var output = ByteBufferAllocator().buffer(capacity: bound)
        var status = Z_OK
        _ = input.withUnsafeReadableBytes { source in
            output.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { target in
                var targetLength = uLong(target.count)
                status = compress2(
                    target.baseAddress!.assumingMemoryBound(to: Bytef.self),
                    &targetLength,
                    source.baseAddress?.assumingMemoryBound(to: Bytef.self),
                    sourceLength,
                    level
                )
                return status == Z_OK ? Int(targetLength) : 0
            }
        }
        guard status == Z_OK else { throw .compressionFailed(zlibStatus: status) }
        return output
    }

    /// Inflates one zlib stream that must fill `input` exactly, producing at most `limit` bytes.
    ///
    /// Never produces more than `limit` bytes: a stream that would inflate beyond it (a zip
    /// bomb) is refused with ``IMWireError/decompressedBodyTooLarge(limit:)``. Memory grows with
    /// the output actually produced, by doubling, and is bounded by `limit` rounded up to the
    /// power of two that ByteBuffer allocates.
    static func decompress(_ input: ByteBuffer, limit: Int) throws(IMWireError) -> ByteBuffer {
        var stream = z_stream()
        var status = inflateInit_(&stream, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { throw .decompressionFailed(zlibStatus: status) }
        defer { inflateEnd(&stream) }

        // Start from a guess and grow geometrically, never past the limit.
        var output = ByteBufferAllocator().buffer(capacity: min(limit, max(256, input.readableBytes * 4)))
        var overflow = false
        input.withUnsafeReadableBytes { source in
            stream.next_in = UnsafeMutablePointer(mutating: source.baseAddress?.assumingMemoryBound(to: Bytef.self))
            stream.avail_in = uInt(source.count)
            while true {
                let remaining = limit - output.readableBytes
                if remaining == 0 {
                    // The limit is reached: one more output byte means the stream is too large.
                    var probe: Bytef = 0
                    stream.avail_out = 1
                    status = withUnsafeMutablePointer(to: &probe) { pointer in
                        stream.next_out = pointer
                        return inflate(&stream, Z_NO_FLUSH)
                    }
                    if stream.avail_out == 0 { overflow = true }
                    return
                }
                var room = min(output.writableBytes, remaining)
                if room == 0 { room = min(max(output.capacity, 256), remaining) }  // grow by doubling
                output.writeWithUnsafeMutableBytes(minimumWritableBytes: room) { target in
                    stream.next_out = target.baseAddress!.assumingMemoryBound(to: Bytef.self)
                    stream.avail_out = uInt(room)
                    status = inflate(&stream, Z_NO_FLUSH)
                    return room - Int(stream.avail_out)
                }
                if status != Z_OK { return }
            }
        }
        stream.next_in = nil
        stream.next_out = nil
        if overflow { throw .decompressedBodyTooLarge(limit: limit) }
        // Z_STREAM_END with all input used is the only success; trailing bytes or a cut stream fail.
        guard status == Z_STREAM_END, stream.avail_in == 0 else {
            throw .decompressionFailed(zlibStatus: status == Z_STREAM_END ? Z_DATA_ERROR : status)
        }
        return output
    }
}
