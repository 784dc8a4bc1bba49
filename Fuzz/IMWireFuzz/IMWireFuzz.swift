// libFuzzer entry point for the IMWire frame decoder and message layer.
//
// Built by Fuzz/fuzz.mk with `swiftc -sanitize=fuzzer` from this file and the sources of
// Sources/IMWire compiled into one module, so IMWire's code is instrumented and this file sees
// its internal API. Checks, for every input:
//   - decoding never crashes, and every error is an IMWireError;
//   - decoding in two chunks (split at an input-chosen point) yields the same frames and error
//     as decoding at once (no dependence on read boundaries);
//   - every decoded frame satisfies the header invariants, and re-encoding it decodes to the same frame body;
//   - every frame that decodes to a message re-encodes to a frame decoding to the same message.

import NIOCore

@_cdecl("LLVMFuzzerTestOneInput")
public func imwireFuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = ByteBuffer(bytes: UnsafeRawBufferPointer(start: data, count: size))
    let whole = decode(chunks: [input])
    if size > 1 {
        let cut = Int(input.getInteger(at: 0, as: UInt8.self)!) % size
        let split = decode(chunks: [input.getSlice(at: 0, length: cut)!, input.getSlice(at: cut, length: size - cut)!])
        check(whole.frames == split.frames && whole.error == split.error, "split decoding differs")
    }
    for frame in whole.frames { checkFrame(frame) }
    checkTLV(input)
    return 0
}

let configuration = IMFrameDecoder.Configuration(maxBodyLength: 256 << 10)

struct Outcome {
    var frames: [IMFrame] = []
    var error: IMWireError? = nil
}

/// Feeds the chunks to one decoder as a channel would: append, then decode until it needs more.
func decode(chunks: [ByteBuffer]) -> Outcome {
    var outcome = Outcome()
    var decoder = IMFrameDecoder(configuration: configuration)
    var buffer = ByteBuffer()
    do {
        for var chunk in chunks {
            buffer.writeBuffer(&chunk)
            while let frame = try decoder.decode(buffer: &buffer) { outcome.frames.append(frame) }
        }
        while let frame = try decoder.decodeLast(buffer: &buffer, seenEOF: true) { outcome.frames.append(frame) }
    } catch {
        outcome.error = error
    }
    return outcome
}

func checkFrame(_ frame: IMFrame) {
    if frame.header.compressType == .none {
        check(Int(frame.header.bodyLength) == frame.body.readableBytes, "body length")
        check(frame.header.checksum == Zlib.crc32(frame.body), "checksum")
    }
    check(frame.body.readableBytes <= configuration.maxBodyLength, "body over the limit")

    // Re-encoding the frame (compressed or not) gives the same plain body back. The seed's
    // 4-byte ACK body is not TLV and only valid uncompressed.
    let isSeedAck = IMFrameDecoder.isSeedAck(frame.header, body: frame.body, accepted: true)
    for compress in isSeedAck ? [IMCompressType.none] : [.none, .zlib] {
        var copy = IMFrame(header: frame.header, body: frame.body)
        copy.header.compressType = compress
        let again = roundTrip(copy)
        check(again?.body == frame.body && again?.header.type == frame.header.type, "frame round trip")
    }

    // A frame that holds a message re-encodes to a frame holding the same message.
    guard let message = try? IMMessage(frame: frame) else { return }
    var expected = message
    if case .ack(var ack) = message, ack.isSeedForm {
        ack.isSeedForm = false
        expected = .ack(ack)
    }
    let rebuilt = message.frame(
        sequence: frame.header.sequence,
        timestamp: frame.header.timestamp,
        sessionID: frame.header.sessionID
    )
    guard let decoded = roundTrip(rebuilt) else {
        check(rebuilt.body.readableBytes > configuration.maxBodyLength, "message frame refused")
        return
    }
    check((try? IMMessage(frame: decoded)) == expected, "message round trip")
}

func roundTrip(_ frame: IMFrame) -> IMFrame? {
    guard var wire = try? IMFrameEncoder().encode(frame) else { return nil }
    var decoder = IMFrameDecoder(configuration: configuration)
    return try? decoder.decode(buffer: &wire)
}

/// The input as a TLV body: validation and lazy parsing agree, and nothing crashes.
func checkTLV(_ body: ByteBuffer) {
    let valid = (try? TLVReader.validate(body)) != nil
    var lazyValid = true
    do {
        var pending = [try TLVFields(parsing: body)]
        while let fields = pending.popLast() {
            for item in fields.items where item.tag == .container { pending.append(try item.items()) }
        }
    } catch {
        lazyValid = false
    }
    check(valid == lazyValid, "validate and parse disagree")
}

func check(_ condition: Bool, _ message: StaticString) {
    if !condition { fatalError("IMWire fuzz invariant violated: \(message)") }
}
