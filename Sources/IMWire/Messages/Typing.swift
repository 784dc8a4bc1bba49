/// TYPING (CONTROL, op 0x0070): what a user is doing in a conversation, an ephemeral signal.
///
/// From a client: TO (a user) or GROUP, and TYPING; the gateway ACKs it (or refuses it:
/// FORBIDDEN for a group the user is not in, RATE_LIMITED). From the gateway: FROM, GROUP for
/// a group conversation, and TYPING; a notification, not acknowledged. A state holds until
/// the next one, or for ``TypingState/lifetime`` seconds: a client that is still typing says
/// so again before then.
public struct Typing: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .typing }

    /// The user it is for (from a client, one-to-one).
    public var to: String?
    /// The group conversation (either direction).
    public var group: String?
    /// Who is typing (from the gateway).
    public var from: String?
    /// The state.
    public var state: TypingState

    /// Creates a typing signal.
    public init(to: String? = nil, group: String? = nil, from: String? = nil, state: TypingState) {
        self.to = to
        self.group = group
        self.from = from
        self.state = state
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.to = try fields.optionalIdentifier(.to)
        self.group = try fields.optionalIdentifier(.group)
        self.from = try fields.optionalIdentifier(.from)
        let raw = try fields.integer(.typing, as: UInt8.self)
        guard let state = TypingState(rawValue: raw) else {
            throw .invalidField(.typing, .valueOutOfRange(String(raw)))
        }
        self.state = state
    }

    public func write(to writer: inout TLVWriter) {
        if let from { writer.write(.from, string: from) }
        if let to { writer.write(.to, string: to) }
        if let group { writer.write(.group, string: group) }
        writer.write(.typing, integer: self.state.rawValue)
    }
}

/// The value of TYPING (tag 0x0021, u8).
public enum TypingState: UInt8, Hashable, Sendable, CaseIterable {
    /// Stopped typing (or sent the message).
    case stopped = 0
    /// Typing.
    case typing = 1
    /// Recording audio.
    case recording = 2
    /// Away from the conversation (the app is in the background, another conversation is open).
    case away = 3

    /// Seconds a state holds without being said again.
    public static let lifetime: UInt32 = 10
}
