/// Constants of the IMWire protocol (see `docs/PROTOCOL.md`).
///
/// The protocol frames every message with a fixed 28-byte big-endian header
/// (``IMFrameHeader``) followed by a body of TLV items (``TLVReader``, ``TLVWriter``).
public enum IMWire {
    /// The magic number that opens every frame: `0xDECAFBAD`.
    public static let magic: UInt32 = 0xDECA_FBAD

    /// The size of the frame header in bytes.
    public static let headerLength = 28

    /// The WebSocket subprotocol (`Sec-WebSocket-Protocol`) of the same frames in binary
    /// WebSocket messages (docs/PROTOCOL.md 1.1).
    public static let webSocketSubprotocol = "imgw.tlv.v1"

    /// The protocol major version this module speaks. Frames with another major version are refused.
    public static let versionMajor: UInt8 = 1

    /// The protocol minor version this module speaks. Higher minor versions only add tags and operations.
    public static let versionMinor: UInt8 = 0

    /// The body limit used when none is configured: 1 MiB.
    public static let defaultMaxBodyLength = 1 << 20

    /// The largest body limit that may be configured: 10 MiB. Applies to transmitted and decompressed bodies.
    public static let hardMaxBodyLength = 10 << 20

    /// The deepest nesting level of TLV items: top-level items are at depth 0,
    /// the items of a container at depth 0 are at depth 1, and so on up to this depth.
    public static let maxTLVDepth = 4

    /// The size of a TLV item header: tag (u16) and length (u32).
    public static let tlvItemHeaderLength = 6

    /// Bodies of at least this many bytes are worth compressing (see ``IMCompressType/choose(bodyLength:peerFeatures:threshold:)``).
    public static let defaultCompressionThreshold = 1024

    /// The shortest valid zlib stream (the compression of zero bytes), the minimum compressed body.
    public static let minimumCompressedBodyLength = 8

    /// The length of the body of an ACK as the seed client sends it: the acknowledged sequence (u32).
    public static let seedAckBodyLength = 4
}
