/// A protocol version, encoded as u16 `major<<8|minor`.
public struct IMProtocolVersion: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// Major version: incompatible changes.
    public var major: UInt8
    /// Minor version: additions only.
    public var minor: UInt8

    /// Creates a version.
    public init(major: UInt8, minor: UInt8) {
        self.major = major
        self.minor = minor
    }

    /// The version this module speaks (1.0).
    public static let current = IMProtocolVersion(major: IMWire.versionMajor, minor: IMWire.versionMinor)

    /// `major<<8|minor`.
    public var rawValue: UInt16 { UInt16(self.major) << 8 | UInt16(self.minor) }

    /// Splits `major<<8|minor`.
    public init(rawValue: UInt16) {
        self.init(major: UInt8(rawValue >> 8), minor: UInt8(truncatingIfNeeded: rawValue))
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// `major.minor`.
    public var description: String { "\(self.major).\(self.minor)" }
}

extension TLVItem {
    /// The value of a VERSION_REQUEST or VERSION_RESPONSE item: version, then feature bits.
    public func versionAndFeatures() throws(IMWireError) -> (IMProtocolVersion, IMFeatures) {
        let raw = try self.integer(as: UInt32.self)
        return (IMProtocolVersion(rawValue: UInt16(raw >> 16)), IMFeatures(rawValue: UInt16(truncatingIfNeeded: raw)))
    }
}

extension TLVWriter {
    /// Writes a VERSION_REQUEST or VERSION_RESPONSE item.
    public mutating func write(_ tag: IMTag, version: IMProtocolVersion, features: IMFeatures) {
        self.write(tag, integer: UInt32(version.rawValue) << 16 | UInt32(features.rawValue))
    }
}
