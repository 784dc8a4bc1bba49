/// The compress type, header byte 17.
public enum IMCompressType: UInt8, Hashable, Sendable, CaseIterable {
    /// The body is the TLV itself.
    case none = 0
    /// The body is a zlib stream (RFC 1950) of the TLV.
    case zlib = 1

    /// The compress type to ask the encoder for: `.zlib` when the peer announced
    /// ``IMFeatures/zlib`` in the handshake and the plain body is at least `threshold` bytes.
    ///
    /// ```swift
    /// let frame = delivery.frame(sequence: seq, timestamp: now, sessionID: sid,
    ///                            compressType: .choose(bodyLength: body.readableBytes, peerFeatures: peer))
    /// ```
    public static func choose(
        bodyLength: Int,
        peerFeatures: IMFeatures?,
        threshold: Int = IMWire.defaultCompressionThreshold
    ) -> IMCompressType {
        guard let peerFeatures, peerFeatures.contains(.zlib), bodyLength > 0, bodyLength >= threshold else {
            return .none
        }
        return .zlib
    }
}
