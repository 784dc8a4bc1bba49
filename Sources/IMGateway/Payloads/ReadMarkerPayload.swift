import IMArchive
import IMWire

/// A read marker one device of a user moved, on the user's own `{prefix}/u/{user}/signal`
/// at QoS 0, for the user's other online devices (READ_MARKER notices). Offline devices read
/// the markers in their conversation list.
///
/// ```json
/// {"device":"phone","through":42,"to":"alice","ts":1735689600123,"unread":0}
/// ```
/// `group` instead of `to` for a group conversation.
public struct ReadMarkerPayload: Codable, Hashable, Sendable {
    /// The device that moved it.
    public var device: String
    /// The one-to-one conversation's other user.
    public var to: String?
    /// The group conversation.
    public var group: String?
    /// The marker: read up to this offset of the user's stream.
    public var through: UInt64
    /// What is left unread.
    public var unread: UInt32
    /// When the gateway took it, Unix milliseconds.
    public var ts: UInt64

    /// A payload for `marker`, moved by `device`.
    public init(device: String, marker: ReadMarker, ts: UInt64) {
        self.device = device
        switch marker.conversation {
        case .user(let id): self.to = id
        case .group(let id): self.group = id
        }
        self.through = marker.readThrough
        self.unread = UInt32(clamping: marker.unread)
        self.ts = ts
    }

    /// The READ_MARKER notice for a device, or `nil` when a field is not valid.
    public func notice() -> ReadMarkerUpdate? {
        switch (to, group) {
        case (let to?, nil) where IMIdentifier.isValid(to):
            ReadMarkerUpdate(conversation: .user(to), readThrough: through, unread: unread)
        case (nil, let group?) where IMIdentifier.isValid(group):
            ReadMarkerUpdate(conversation: .group(group), readThrough: through, unread: unread)
        default:
            nil
        }
    }
}
