import Foundation
import IMWire
import NIOCore

/// A chat message on `{prefix}/u/{to}/inbox`.
///
/// ```json
/// {"from":"alice","id":"m-0001","text":"Hello, Bob! 👋","to":"bob","ts":1735689600123,"type":"text"}
/// ```
/// A group message, one copy per member's inbox, carries `group` (`to` is then the member); a
/// carbon, a copy in the sender's own inbox for the sender's other devices, carries `carbon`
/// (`to` is the one-to-one recipient, or the sender for a group message).
/// Text content is in `text`; other content (`type` `image`, `file_content`, `voice`, `video`,
/// `location_card`, `custom`: the lower-cased IMWire tag names) is base64 in `data`. `qos` is
/// present only when not 1; `ext` holds application-defined items (tags 0xF000–0xFFFE).
/// With the message archive, `offset` is the copy's place in the stream of the inbox's user
/// and `epoch` the archive's epoch (``IMArchive/ArchiveEpoch``). A message its sender deleted
/// for everyone is a tombstone: `type` `deleted`, `deleted` the time, no `text`, `data` or `ext`.
public struct ChatPayload: Codable, Hashable, Sendable {
    /// The sender's message id.
    public var id: String
    /// The sender's user id.
    public var from: String
    /// The recipient's user id: the inbox's owner, or for a carbon of a one-to-one message, its
    /// recipient.
    public var to: String
    /// The group, for a group message.
    public var group: String?
    /// `true` for a carbon: a copy of what `from` sent, for `from`'s other devices.
    public var carbon: Bool?
    /// When the gateway accepted the message, Unix milliseconds (SERVER_TIME).
    public var ts: UInt64
    /// The content type: the lower-cased tag name, e.g. `text` or `image`.
    public var type: String
    /// The text, for `text` content.
    public var text: String?
    /// The content bytes in base64, for other content.
    public var data: String?
    /// The QoS the sender asked for, when not 1.
    public var qos: Int?
    /// Application-defined items, passed through to the recipient.
    public var ext: [Extension]?
    /// The copy's offset in the stream of the inbox's user, when the archive stored it.
    public var offset: UInt64?
    /// The archive's epoch, with `offset`.
    public var epoch: UInt64?
    /// A tombstone (`type` `deleted`, no content): when the sender deleted the message for
    /// everyone, Unix milliseconds.
    public var deleted: UInt64?

    /// One application-defined TLV item.
    public struct Extension: Codable, Hashable, Sendable {
        /// The tag, 0xF000–0xFFFE (61440–65534).
        public var tag: Int
        /// The value in base64.
        public var data: String

        /// Creates an item.
        public init(tag: Int, data: String) {
            self.tag = tag
            self.data = data
        }
    }

    /// Creates a payload field by field.
    public init(
        id: String, from: String, to: String, ts: UInt64, type: String,
        text: String? = nil, data: String? = nil, qos: Int? = nil, ext: [Extension]? = nil,
        group: String? = nil, carbon: Bool? = nil, offset: UInt64? = nil, epoch: UInt64? = nil
    ) {
        self.offset = offset
        self.epoch = epoch
        self.group = group
        self.carbon = carbon
        self.id = id
        self.from = from
        self.to = to
        self.ts = ts
        self.type = type
        self.text = text
        self.data = data
        self.qos = qos
        self.ext = ext
    }

    /// The payload for `send`, sent by `from` and accepted at `serverTime` (Unix ms), for the
    /// inbox of `to` (by default the one-to-one recipient; a group's member for a group
    /// message), a carbon if `carbon`.
    public init(send: ChatSend, from: String, serverTime: UInt64, to: String? = nil, carbon: Bool = false) {
        let text = send.content.text
        self.init(
            id: send.messageID, from: from, to: to ?? send.to, ts: serverTime,
            type: Self.typeName(of: send.content.tag),
            text: text,
            data: text == nil ? Data(send.content.value.readableBytesView).base64EncodedString() : nil,
            qos: send.qos == .atLeastOnce ? nil : Int(send.qos.rawValue),
            ext: send.extensions.isEmpty
                ? nil
                : send.extensions.map { Extension(tag: Int($0.tag.rawValue), data: Data($0.value.readableBytesView).base64EncodedString()) },
            group: send.group, carbon: carbon ? true : nil
        )
    }

    /// The copy of a stored message (``archived(send:from:serverTime:)``) for the stream of
    /// `user`: a message it received (for a group message, `to` is the member), or, when
    /// `own`, a carbon of what `user` sent.
    public func copy(for user: String, own: Bool) -> ChatPayload {
        var copy = self
        if own {
            copy.carbon = true
            if group != nil { copy.to = user }
        } else {
            copy.carbon = nil
            copy.to = user
        }
        return copy
    }

    /// What the archive stores of `send`: the body every copy is made from
    /// (``copy(for:own:)``), `to` the recipient or the group.
    public static func archived(send: ChatSend, from: String, serverTime: UInt64) -> ChatPayload {
        ChatPayload(send: send, from: from, serverTime: serverTime)
    }

    /// The `type` of a tombstone.
    public static let deletedType = "deleted"

    /// The tombstone of a stored body (``archived(send:from:serverTime:)``): the same message,
    /// without its content, deleted at `time`. A body that cannot be read becomes a bare
    /// tombstone with what is known.
    public static func tombstone(of body: [UInt8], sender: String, messageID: String, at time: UInt64) -> [UInt8] {
        var payload = (try? PayloadCodec.decode(ChatPayload.self, from: body))
            ?? ChatPayload(id: messageID, from: sender, to: sender, ts: time, type: deletedType)
        payload.type = deletedType
        payload.text = nil
        payload.data = nil
        payload.ext = nil
        payload.deleted = time
        return PayloadCodec.encode(payload)
    }

    /// The DELIVERY frame body for the recipient's devices; checks every field.
    public func delivery(resend: Bool = false) throws(PayloadError) -> ChatDelivery {
        guard IMIdentifier.isValid(self.from) else { throw .invalidField("from", value: self.from) }
        guard IMWire.messageIDLength.contains(self.id.utf8.count) else { throw .invalidField("id", value: self.id) }
        if self.deleted != nil || self.type == Self.deletedType {
            if let group { guard IMIdentifier.isValid(group) else { throw .invalidField("group", value: group) } }
            let isCarbon = carbon == true
            if isCarbon && group == nil { guard IMIdentifier.isValid(self.to) else { throw .invalidField("to", value: self.to) } }
            var delivery = ChatDelivery(
                from: self.from, messageID: self.id, serverTime: self.deleted ?? self.ts, content: .text(""), resend: resend, group: group,
                to: isCarbon && group == nil ? self.to : nil, carbon: isCarbon)
            delivery.deleted = true
            return delivery
        }
        guard let tag = Self.tag(ofType: self.type) else { throw .invalidField("type", value: self.type) }
        let value: ByteBuffer
        if tag == .text, let text = self.text {
            value = ByteBuffer(string: text)
        } else {
            guard let data = self.data else { throw .invalidField("data", value: "(absent)") }
            value = try Self.bytes(base64: data, field: "data")
        }
        var qos = IMQoS.atLeastOnce
        if let raw = self.qos {
            guard let parsed = UInt8(exactly: raw).flatMap(IMQoS.init(rawValue:)) else { throw .invalidField("qos", value: "\(raw)") }
            qos = parsed
        }
        var extensions: [TLVItem] = []
        for (index, item) in (self.ext ?? []).enumerated() {
            guard let raw = UInt16(exactly: item.tag), IMTag(raw).isApplicationDefined else {
                throw .invalidField("ext[\(index)].tag", value: "\(item.tag)")
            }
            extensions.append(TLVItem(tag: IMTag(raw), value: try Self.bytes(base64: item.data, field: "ext[\(index)].data")))
        }
        if let group { guard IMIdentifier.isValid(group) else { throw .invalidField("group", value: group) } }
        let isCarbon = carbon == true
        if isCarbon && group == nil { guard IMIdentifier.isValid(self.to) else { throw .invalidField("to", value: self.to) } }
        return ChatDelivery(
            from: self.from, messageID: self.id, serverTime: self.ts, content: IMContent(tag: tag, value: value),
            qos: qos, resend: resend, extensions: extensions, group: group,
            to: isCarbon && group == nil ? self.to : nil, carbon: isCarbon)
    }

    /// The `type` of a content tag: its IMWire name in lower case (`text`, `image`, ...).
    public static func typeName(of tag: IMTag) -> String {
        typeNames[tag.rawValue] ?? tag.name?.lowercased() ?? "0x\(String(tag.rawValue, radix: 16))"
    }

    /// The content tag of a `type`, or `nil` if it names none.
    public static func tag(ofType type: String) -> IMTag? {
        tagsByType[type]
    }

    private static let contentTags: [IMTag] = (0x1001...0x1007).map { IMTag(UInt16($0)) }
    // (Looked up for every message: computed once.)
    private static let typeNames: [UInt16: String] = Dictionary(
        uniqueKeysWithValues: contentTags.compactMap { tag in tag.name.map { (tag.rawValue, $0.lowercased()) } })
    private static let tagsByType: [String: IMTag] = Dictionary(
        uniqueKeysWithValues: contentTags.map { (typeName(of: $0), $0) })

    private static func bytes(base64: String, field: String) throws(PayloadError) -> ByteBuffer {
        guard let data = Data(base64Encoded: base64) else { throw .invalidField(field, value: base64) }
        return ByteBuffer(bytes: data)
    }
}
