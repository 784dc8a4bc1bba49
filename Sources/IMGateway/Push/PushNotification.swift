import Crypto
import Foundation
import IMWire

/// What the offline-push webhook POSTs for a chat that waits for a user with no device
/// online (docs/OPERATIONS.md, "Offline push"):
///
/// ```json
/// {"event":"chat","from":"alice","id":"m-0001","preview":"Hello","to":"bob","ts":1735689600123,"type":"text"}
/// ```
/// `ts` is when the sender's gateway accepted the message (Unix milliseconds); `preview` is
/// present only with `push.preview: text` and text content.
struct PushNotification: Codable, Hashable, Sendable {
    /// What happened: `chat`.
    var event: String
    /// The recipient.
    var to: String
    /// The sender.
    var from: String
    /// The sender's message id: with `from`, what a receiver deduplicates on.
    var id: String
    /// When the message was accepted, Unix milliseconds.
    var ts: UInt64
    /// The content type, as in the chat payload (`text`, `image`, ...).
    var type: String
    /// The group, for a group message (`to` is then the member).
    var group: String?
    /// The start of the text, if configured.
    var preview: String?

    /// The notification for `chat`, with a preview of up to `previewLength` characters of
    /// its text when `preview` is `.text`.
    init(chat: ChatPayload, preview: GatewayConfiguration.PushSettings.Preview, previewLength: Int) {
        event = "chat"
        to = chat.to
        from = chat.from
        id = chat.id
        ts = chat.ts
        type = chat.type
        group = chat.group
        switch preview {
        case .none: self.preview = nil
        case .text: self.preview = chat.text.map { String($0.prefix(previewLength)) }
        }
    }

    /// The notification for `send` from `sender`, accepted at `serverTime` (Unix ms), for its
    /// recipient, or for the member `member` of its group.
    init(send: ChatSend, from sender: String, serverTime: UInt64, settings: GatewayConfiguration.PushSettings, to member: String? = nil) {
        event = "chat"
        to = member ?? send.to
        group = send.group
        from = sender
        id = send.messageID
        ts = serverTime
        type = ChatPayload.typeName(of: send.content.tag)
        switch settings.preview {
        case .none: preview = nil
        case .text: preview = send.content.text.map { String($0.prefix(settings.previewLength)) }
        }
    }

    /// What makes two copies of one message the same notification.
    var key: String { "\(to)\u{0}\(from)\u{0}\(id)" }

    /// The request body.
    var body: [UInt8] { PayloadCodec.encode(self) }
}

/// The `X-IMGW-Signature` header of a webhook request: `t=<Unix seconds>,v1=<hex>`, where the
/// hex is HMAC-SHA256 under `push.secret` of the seconds, a `.`, and the body. A receiver
/// recomputes it, compares in constant time, and refuses a `t` far from its clock (a replay).
struct PushSignature: Sendable {
    static let header = "X-IMGW-Signature"
    private let key: SymmetricKey

    init(secret: String) {
        key = SymmetricKey(data: Array(secret.utf8))
    }

    /// The header's value for `body` sent at `time` (Unix seconds).
    func value(body: [UInt8], time: Int64) -> String {
        var mac = HMAC<SHA256>(key: key)
        mac.update(data: Array("\(time).".utf8))
        mac.update(data: body)
        let hex = mac.finalize().map { String(format: "%02x", $0) }.joined()
        return "t=\(time),v1=\(hex)"
    }
}
