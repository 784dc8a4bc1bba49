import IMWire
import NIOCore

/// The source of `Fixtures/vectors.json`: every test vector, built with the typed API.
enum VectorCatalog {
    /// Fixed clock: 2025-01-01T00:00:00Z, and 123 ms later in milliseconds.
    static let time: UInt32 = 1_735_689_600
    static let serverTime: UInt64 = 1_735_689_600_123
    /// HS256 JWT for user `alice`, signed with the test secret `imgw-test-secret`, expiring in 2100.
    static let token =
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MTczNTY4OTYwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.YVKqREpRid_SqYD9mqyE1cctNyeKCCJbxDNuEwAJecc"
    /// ``token``'s `exp` (2100-01-01T00:00:00Z) in Unix milliseconds, as TOKEN_EXPIRY carries it.
    static let tokenExpiry: UInt64 = 4_102_444_800_000
    /// The token a refresh replaces it with: same user and secret, issued an hour later
    /// (`iat` 1735693200), expiring an hour later (`exp` 4102448400).
    static let newToken =
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MTczNTY5MzIwMCwiZXhwIjo0MTAyNDQ4NDAwfQ.XhtFwJUU3M9cG2VcMKLKFN3FspLeuKD5n_kmCBunXU4"
    static let newTokenExpiry: UInt64 = 4_102_448_400_000
    /// The archive's epoch in the vectors (any number from 1 to 2^53 - 1).
    static let epoch: UInt64 = 0x0001_2345_6789_ABCD

    struct Entry {
        var name: String
        var section: String
        var title: String
        var direction: String
        var description: String
        var frame: IMFrame
        var message: IMMessage
        var canonical = true
    }

    struct Malformed {
        var name: String
        var title: String
        var description: String
        var wire: ByteBuffer
        var stage: String
        var expected: IMErrorCode
    }

    /// What re-encoding `message` and decoding it again yields: the seed ACK form is read, never written.
    static func canonical(_ message: IMMessage) -> IMMessage {
        guard case .ack(var ack) = message, ack.isSeedForm else { return message }
        ack.isSeedForm = false
        return .ack(ack)
    }

    static let c2g = "client → gateway"
    static let g2c = "gateway → client"

    static func entry(
        _ name: String,
        _ section: String,
        _ title: String,
        _ direction: String,
        _ description: String,
        _ message: IMMessage,
        sequence: UInt32,
        session: UInt16 = 1,
        compress: IMCompressType = .none
    ) -> Entry {
        Entry(
            name: name,
            section: section,
            title: title,
            direction: direction,
            description: description,
            frame: message.frame(sequence: sequence, timestamp: time, sessionID: session, compressType: compress),
            message: message,
            canonical: compress == .none
        )
    }

    static let location = IMLocation(
        lat: 52.520008,
        lon: 13.404954,
        tst: 1_735_689_590,
        acc: 12,
        alt: 34,
        vel: 5,
        cog: 270,
        batt: 87
    )

    static var entries: [Entry] {
        let hello = Hello(features: [.zlib])
        let longText = String(repeating: "Compression pays off for long messages like this one. ", count: 6)
        return [
            // Handshake
            entry("hello", "Handshake", "HELLO announcing zlib", c2g,
                  "Version 1.0; feature bits 0x0001 (ZLIB): the gateway may now compress.",
                  .hello(hello), sequence: 1),
            entry("hello-ok", "Handshake", "HELLO_OK", g2c,
                  "Version 1.0; features ZLIB, QOS2_CHAT, PRESENCE, LOCATION, PUBSUB, RECEIPTS; body limit 1 MiB; answers sequence 1. The client may now compress.",
                  .helloOK(HelloOK(features: [.zlib, .qos2Chat, .presence, .location, .pubSub, .receipts],
                                   maxBodyLength: 1 << 20, refSequence: 1)), sequence: 1),
            Entry(name: "hello-seed", section: "Handshake", title: "HELLO in the seed client's form", direction: c2g,
                  description: "No OP item (implied by VERSION_REQUEST), encrypt type 1, feature bits 0, sequence category 2 (control) in the top byte. Accepted.",
                  frame: IMFrame(header: IMFrameHeader(type: .control, sequence: 0x0200_0001, timestamp: time, encryptType: .seedCRC32, sessionID: 0x5A5A),
                                 body: { var w = TLVWriter(); w.write(.versionRequest, version: .current, features: []); return w.buffer }()),
                  message: .hello(Hello(features: [])), canonical: false),
            // Heartbeat
            entry("heartbeat", "Heartbeat", "HEARTBEAT", c2g, "Empty body. Valid at any time, also before HELLO and LOGIN.",
                  .heartbeat, sequence: 4),
            entry("heartbeat-ack", "Heartbeat", "ACK of the heartbeat", g2c,
                  "Type ACK, the heartbeat's sequence (4) and session id, empty body.",
                  .ack(Ack(sequence: 4)), sequence: 0),
            Entry(name: "heartbeat-seed", section: "Heartbeat", title: "HEARTBEAT in the seed client's form", direction: c2g,
                  description: "Encrypt type 1 and sequence category 1 (heartbeat) in the top byte. Accepted; the ACK echoes 0x01000007.",
                  frame: IMFrame(header: IMFrameHeader(type: .heartbeat, sequence: 0x0100_0007, timestamp: time, encryptType: .seedCRC32, sessionID: 0x5A5A),
                                 body: ByteBuffer()),
                  message: .heartbeat, canonical: false),
            // Login
            entry("login", "Login", "LOGIN with a token and a device id", c2g,
                  "AUTH_TOKEN is an HS256 JWT (sub `alice`, test secret `imgw-test-secret`); DEVICE_ID `phone-1`.",
                  .login(LoginRequest(token: token, deviceID: "phone-1")), sequence: 2),
            entry("login-no-receipts", "Login", "LOGIN asking for no receipt notices", c2g,
                  "RECEIPT_NOTICES 0: the gateway sends this device (`watch-1`) no RECEIPT_NOTICE frames (section 6.5). Absent or 1: it does.",
                  .login(LoginRequest(token: token, deviceID: "watch-1", receiptNotices: false)), sequence: 2),
            entry("login-no-carbons", "Login", "LOGIN asking for no carbons", c2g,
                  "CARBONS 0: the gateway sends this device (`car-1`) no copies of what alice's other devices send (section 6.12). Absent or 1: it does.",
                  .login(LoginRequest(token: token, deviceID: "car-1", carbons: false)), sequence: 2),
            entry("login-ok", "Login", "LOGIN_OK", g2c,
                  "User `alice`, device `phone-1`, server time, heartbeat every 30 s; answers sequence 2.",
                  .loginOK(LoginOK(userID: "alice", deviceID: "phone-1", serverTime: serverTime, heartbeatInterval: 30, refSequence: 2)),
                  sequence: 2),
            entry("login-ok-token-expiry", "Login", "LOGIN_OK with the token's expiry", g2c,
                  "As `login-ok`, plus TOKEN_EXPIRY: the token's `exp` (2100-01-01T00:00:00Z) in Unix milliseconds. The gateway ends the session then (plus its leeway) unless a TOKEN_REFRESH is ACKed first (section 6.1.1).",
                  .loginOK(LoginOK(userID: "alice", deviceID: "phone-1", serverTime: serverTime, heartbeatInterval: 30,
                                   tokenExpiry: tokenExpiry, refSequence: 2)),
                  sequence: 2),
            entry("login-ok-session-resumed", "Login", "LOGIN_OK of a resumed session", g2c,
                  "As `login-ok`, plus SESSION_RESUMED 1: the broker kept the device's session, and what was queued while it was away follows. 0 says the session is new: whatever was queued for the device before is gone (section 6.1).",
                  .loginOK(LoginOK(userID: "alice", deviceID: "phone-1", serverTime: serverTime, heartbeatInterval: 30,
                                   refSequence: 2, sessionResumed: true)),
                  sequence: 2),
            entry("login-refused", "Login", "Login refused", g2c,
                  "ERROR with AUTH_FAILED (201) answering sequence 2; the gateway then closes the connection.",
                  .error(ErrorNotice(code: .authFailed, message: "token signature invalid", refSequence: 2)), sequence: 2),
            entry("logout", "Login", "LOGOUT", c2g, "Ends this device's session.", .logout(Logout()), sequence: 20),
            entry("logout-ack", "Login", "ACK of the LOGOUT", g2c, "Then the gateway closes the connection.",
                  .ack(Ack(sequence: 20)), sequence: 0),
            // Token refresh
            entry("token-refresh", "Token refresh", "TOKEN_REFRESH", c2g,
                  "OP TOKEN_REFRESH and AUTH_TOKEN: a newer token for `alice` (issued an hour later, expiring an hour later). OP is required: without it, AUTH_TOKEN would make this a LOGIN.",
                  .tokenRefresh(TokenRefresh(token: newToken)), sequence: 16),
            entry("token-refresh-ack", "Token refresh", "ACK of the TOKEN_REFRESH", g2c,
                  "The new token is accepted: ACK of sequence 16 with TOKEN_EXPIRY, the new token's `exp` in Unix milliseconds. The session now ends then (plus the gateway's leeway).",
                  .ack(.tokenRefreshed(sequence: 16, tokenExpiry: newTokenExpiry)), sequence: 0),
            entry("token-refresh-expired", "Token refresh", "Negative ACK: the new token has expired", g2c,
                  "ACK of sequence 17 with TOKEN_EXPIRED (202): the token offered had already expired. The connection stays open and the session goes on until the current token expires; refresh again with another token.",
                  .ack(.refusing(sequence: 17, code: .tokenExpired, message: "token expired at 2025-01-01T00:00:00Z")), sequence: 0),
            // Chat
            entry("chat", "Chat", "Chat message from alice to bob", c2g,
                  "DATA with TO `bob`, MESSAGE_ID `m-0001`, TEXT `Hello, Bob! 👋` (UTF-8). QoS 1 (no QOS item).",
                  .chat(ChatSend(to: "bob", messageID: "m-0001", content: .text("Hello, Bob! 👋"))), sequence: 3),
            entry("chat-ack", "Chat", "Gateway ACK of the chat message", g2c,
                  "The broker accepted it: ACK of sequence 3 with MESSAGE_ID and SERVER_TIME.",
                  .ack(Ack(sequence: 3, messageID: "m-0001", serverTime: serverTime)), sequence: 0),
            entry("chat-qos2-resend", "Chat", "Chat message with QoS 2, resent", c2g,
                  "QOS 2 (exactly once) and RESEND 1: sent again after a reconnect, same MESSAGE_ID.",
                  .chat(ChatSend(to: "bob", messageID: "m-0002", content: .text("Are you there?"), qos: .exactlyOnce, resend: true)),
                  sequence: 5),
            entry("chat-nack", "Chat", "Negative ACK of a chat message", g2c,
                  "ACK of sequence 5 with ERROR_CODE FORBIDDEN (203) and a message: the message was not sent.",
                  .ack(.refusing(sequence: 5, code: .forbidden, message: "bob does not accept messages from alice")), sequence: 0),
            entry("chat-id-reused", "Chat", "Negative ACK: message id reused", g2c,
                  "ACK of sequence 7, a chat with MESSAGE_ID `m-0001` and other content than the `m-0001` the gateway accepted before: MESSAGE_ID_REUSED (305). Nothing was sent; send it with a new id.",
                  .ack(.refusing(sequence: 7, code: .messageIDReused, message: "message id m-0001 was already used for another message")),
                  sequence: 0),
            entry("chat-rate-limited", "Chat", "Negative ACK: rate limited", g2c,
                  "ACK of sequence 9 with RATE_LIMITED (302) and RETRY_AFTER 250: the device sent chat faster than its limit. Nothing was sent; the gateway refuses every CHAT of this connection until 250 ms have passed and this message comes again, so the device sends it and those refused after it again then, in their order (section 6.3).",
                  .ack(.rateLimited(sequence: 9, retryAfter: 250, message: "more than 20 chat messages per second; retry in 250 ms")),
                  sequence: 0),
            // Delivery
            entry("delivery", "Delivery", "Delivery to bob's device", g2c,
                  "DATA with FROM `alice`, MESSAGE_ID, SERVER_TIME and the content, on bob's connection (gateway sequence 3).",
                  .delivery(ChatDelivery(from: "alice", messageID: "m-0001", serverTime: serverTime, content: .text("Hello, Bob! 👋"))),
                  sequence: 3),
            entry("delivery-ack", "Delivery", "Device ACK of the delivery", c2g, "ACK of sequence 3, empty body.",
                  .ack(Ack(sequence: 3)), sequence: 0),
            Entry(name: "delivery-ack-seed", section: "Delivery", title: "Device ACK in the seed client's form", direction: c2g,
                  description: "A new sequence (9) in the header and a 4-byte body holding the acknowledged sequence (3). Accepted, never sent.",
                  frame: IMFrame(header: IMFrameHeader(type: .ack, sequence: 9, timestamp: time, encryptType: .seedCRC32, sessionID: 1),
                                 body: ByteBuffer(bytes: [0, 0, 0, 3])),
                  message: .ack({ var a = Ack(sequence: 3); a.isSeedForm = true; return a }()), canonical: false),
            entry("delivery-zlib", "Delivery", "Compressed delivery", g2c,
                  "Compress type 1: the body is a zlib stream; length and CRC are those of the compressed bytes. The items are those of the inflated body.",
                  .delivery(ChatDelivery(from: "alice", messageID: "m-0003", serverTime: serverTime, content: .text(longText))),
                  sequence: 4, compress: .zlib),
            // Archive
            entry("login-position", "Archive", "LOGIN with the device's position", c2g,
                  "As `login`, plus STREAM_EPOCH and STREAM_OFFSET: the device has every stored message of its user's stream up to offset 41 of this epoch (section 6.14). Without them the gateway uses the position it kept for the device.",
                  .login(LoginRequest(token: token, deviceID: "phone-1", position: StreamPosition(epoch: epoch, offset: 41))), sequence: 2),
            entry("login-ok-archive", "Archive", "LOGIN_OK of a gateway with a message archive", g2c,
                  "As `login-ok`, plus STREAM_EPOCH, STREAM_OFFSET 41 and SYNC_STATUS 0 (continued): every stored message after offset 41 follows, with ARCHIVED, before the live ones (section 6.14).",
                  .loginOK(LoginOK(userID: "alice", deviceID: "phone-1", serverTime: serverTime, heartbeatInterval: 30,
                                   refSequence: 2, sessionResumed: false, position: StreamPosition(epoch: epoch, offset: 41), syncStatus: .continued)),
                  sequence: 2),
            entry("chat-ack-stored", "Archive", "ACK of a stored chat message", g2c,
                  "As `chat-ack`, plus STREAM_OFFSET 17: the message is stored, at offset 17 of the sender's own stream (its copy for the user's other devices).",
                  .ack(Ack(sequence: 3, messageID: "m-0001", serverTime: serverTime, streamOffset: 17)), sequence: 0),
            entry("chat-store-unavailable", "Archive", "Negative ACK: the archive cannot store it", g2c,
                  "STORE_UNAVAILABLE (503) with RETRY_AFTER 1000: nothing was stored or sent. The device sends it again after 1 s, with the same MESSAGE_ID, before newer ones (section 6.14).",
                  .ack(.storeUnavailable(sequence: 5, retryAfter: 1_000, message: "the message archive could not store it: disk full")), sequence: 0),
            entry("delivery-offset", "Archive", "Delivery with its stream offset", g2c,
                  "As `delivery`, plus STREAM_OFFSET 42: the message's place in bob's stream.",
                  .delivery(ChatDelivery(from: "alice", messageID: "m-0001", serverTime: serverTime, content: .text("Hello, Bob! 👋"), streamOffset: 42)),
                  sequence: 3),
            entry("delivery-archived", "Archive", "Delivery replayed from the archive", g2c,
                  "STREAM_OFFSET 42 and ARCHIVED 1: bob's device had missed it (the broker lost it, or it was offline past its session); it came from the archive.",
                  .delivery(ChatDelivery(from: "alice", messageID: "m-0001", serverTime: serverTime, content: .text("Hello, Bob! 👋"),
                                         streamOffset: 42, archived: true)),
                  sequence: 4),
            entry("sync", "Archive", "SYNC from a position", c2g,
                  "The app came to the foreground: deliver every stored message after offset 42 of this epoch not delivered on this connection yet. Without STREAM_EPOCH and STREAM_OFFSET: after the position the gateway knows.",
                  .sync(Sync(position: StreamPosition(epoch: epoch, offset: 42))), sequence: 21),
            entry("sync-ack", "Archive", "ACK of the SYNC", g2c,
                  "Sent after the replayed deliveries: the device is caught up to offset 57 (the stream's end when the SYNC came), SYNC_STATUS 0.",
                  .ack(Ack(sequence: 21, streamOffset: 57, streamEpoch: epoch, syncStatus: .continued)), sequence: 0),
            // History
            entry("history", "History", "HISTORY: the newest page of the conversation with alice", c2g,
                  "bob's new tablet asks for the 2 newest messages of his conversation with alice (TO `alice`; GROUP for a group). BEFORE pages back, AFTER forward; without LIMIT a page holds up to 50 (section 6.15).",
                  .history(HistoryQuery(conversation: .user("alice"), limit: 2)), sequence: 31),
            entry("history-page", "History", "HISTORY_PAGE answering it", g2c,
                  "REF_SEQUENCE 31, STREAM_EPOCH, TO `alice`, and the messages oldest first, each a record of DELIVERY items with its STREAM_OFFSET in bob's stream: one alice sent, then bob's reply (CARBON, TO `alice`). No COMPLETE: older messages remain; the next page is BEFORE 41.",
                  .historyPage(HistoryAnswer(refSequence: 31, epoch: epoch, conversation: .user("alice"), complete: false, messages: [
                      ChatDelivery(from: "alice", messageID: "m-0001", serverTime: serverTime, content: .text("Hello, Bob! 👋"), streamOffset: 41),
                      ChatDelivery(from: "bob", messageID: "m-0002", serverTime: serverTime + 1_000, content: .text("Hi!"), to: "alice",
                                   carbon: true, streamOffset: 42),
                  ])), sequence: 5),
            entry("history-before", "History", "HISTORY: the page before, in a group", c2g,
                  "GROUP `team`, BEFORE 41, LIMIT 50: the 50 newest messages of the group older than offset 41 of bob's stream. FORBIDDEN if bob is not a member.",
                  .history(HistoryQuery(conversation: .group("team"), position: .before(41), limit: 50)), sequence: 32),
            entry("conversations", "History", "CONVERSATIONS: the first screen", c2g,
                  "The 20 most recent conversations. The next page: BEFORE the STREAM_OFFSET of the last line.",
                  .conversations(ConversationsQuery(limit: 20)), sequence: 33),
            entry("conversation-list", "History", "CONVERSATION_LIST answering it", g2c,
                  "REF_SEQUENCE 33, STREAM_EPOCH, COMPLETE 1 (no older conversation), one record per conversation, the most recent first: the conversation (TO or GROUP), its newest message's STREAM_OFFSET and SERVER_TIME, READ_THROUGH, UNREAD, and the newest message's DELIVERY items in a nested record.",
                  .conversationList(ConversationsAnswer(refSequence: 33, epoch: epoch, complete: true, lines: [
                      .init(conversation: .group("team"), lastOffset: 43, lastTime: serverTime + 2_000, readThrough: 0, unread: 1,
                            last: ChatDelivery(from: "carol", messageID: "m-0300", serverTime: serverTime + 2_000, content: .text("Lunch?"),
                                               group: "team", streamOffset: 43)),
                      .init(conversation: .user("alice"), lastOffset: 42, lastTime: serverTime + 1_000, readThrough: 42, unread: 0,
                            last: ChatDelivery(from: "bob", messageID: "m-0002", serverTime: serverTime + 1_000, content: .text("Hi!"), to: "alice",
                                               carbon: true, streamOffset: 42)),
                  ])), sequence: 6),
            entry("read-marker", "History", "READ_MARKER: read up to an offset", c2g,
                  "bob read the group `team` up to offset 43 of his stream (section 6.17).",
                  .readMarker(ReadMarkerUpdate(conversation: .group("team"), readThrough: 43)), sequence: 34),
            entry("read-marker-ack", "History", "ACK of the READ_MARKER", g2c,
                  "READ_THROUGH 43 (the marker now: it never moves back) and UNREAD 0.",
                  .ack(Ack(sequence: 34, readThrough: 43, unread: 0)), sequence: 0),
            entry("read-marker-notice", "History", "READ_MARKER to bob's other devices", g2c,
                  "On bob's laptop, online: another device of bob moved the marker; the unread count of `team` is 0. Not acknowledged.",
                  .readMarker(ReadMarkerUpdate(conversation: .group("team"), readThrough: 43, unread: 0)), sequence: 7),
            entry("delete", "History", "DELETE: alice deletes her message for everyone", c2g,
                  "MESSAGE_ID `m-0001`, a message alice sent (FROM, if present, must be alice). Every copy becomes a tombstone (section 6.18).",
                  .delete(MessageDelete(messageID: "m-0001")), sequence: 35),
            entry("delete-ack", "History", "ACK of the DELETE", g2c,
                  "MESSAGE_ID and SERVER_TIME (when it was deleted): every copy is a tombstone, and every device of bob (and alice's others) is told.",
                  .ack(Ack(sequence: 35, messageID: "m-0001", serverTime: serverTime + 60_000)), sequence: 0),
            entry("delivery-deleted", "History", "The tombstone on bob's device", g2c,
                  "A DELIVERY with DELETED 1 and no content: FROM `alice`, MESSAGE_ID `m-0001`, SERVER_TIME the deletion's, STREAM_OFFSET the tombstone's place in bob's stream. bob's device ACKs it and removes the message; no delivered receipt goes back for it. History shows the message the same way.",
                  .delivery({
                      var tombstone = ChatDelivery(from: "alice", messageID: "m-0001", serverTime: serverTime + 60_000, content: .text(""), streamOffset: 44)
                      tombstone.deleted = true
                      return tombstone
                  }()),
                  sequence: 8),
            // Groups
            entry("group-chat", "Groups", "Chat message from alice to the group `team`", c2g,
                  "DATA with GROUP `team` instead of TO: CHAT is implied by GROUP without FROM. Every member but alice's sending device gets it (section 6.11).",
                  .chat(ChatSend(group: "team", messageID: "m-0100", content: .text("Standup in 5"))), sequence: 11),
            entry("group-chat-forbidden", "Groups", "Negative ACK: not a member", g2c,
                  "ACK of sequence 11 with FORBIDDEN (203): alice is not a member of `team`. Nothing was sent.",
                  .ack(.refusing(sequence: 11, code: .forbidden, message: "alice is not a member of team")), sequence: 0),
            entry("group-delivery", "Groups", "Delivery of the group message to bob", g2c,
                  "DATA with FROM `alice` and GROUP `team`: DELIVERY is implied by FROM.",
                  .delivery(ChatDelivery(from: "alice", messageID: "m-0100", serverTime: serverTime, content: .text("Standup in 5"), group: "team")),
                  sequence: 12),
            // Carbons
            entry("carbon", "Carbons", "Carbon of a message alice sent from another device", g2c,
                  "On alice's tablet: OP DELIVERY (needed: FROM and TO without it would imply CHAT), FROM `alice`, TO `bob` (the conversation), CARBON 1. The tablet ACKs it like any DELIVERY.",
                  .delivery(ChatDelivery(from: "alice", messageID: "m-0001", serverTime: serverTime, content: .text("Hello, Bob! 👋"), to: "bob", carbon: true)),
                  sequence: 13),
            entry("carbon-group", "Carbons", "Carbon of a group message", g2c,
                  "On alice's tablet: FROM `alice`, GROUP `team`, CARBON 1.",
                  .delivery(ChatDelivery(from: "alice", messageID: "m-0100", serverTime: serverTime, content: .text("Standup in 5"), group: "team", carbon: true)),
                  sequence: 14),
            // Typing
            entry("typing", "Typing", "alice is typing to bob", c2g,
                  "OP TYPING, TO `bob`, TYPING 1 (typing). The gateway ACKs it.",
                  .typing(Typing(to: "bob", state: .typing)), sequence: 15),
            entry("typing-ack", "Typing", "ACK of the TYPING", g2c, "ACK of sequence 15.",
                  .ack(Ack(sequence: 15)), sequence: 0),
            entry("typing-notice", "Typing", "bob's device learns that alice is typing", g2c,
                  "OP TYPING, FROM `alice`, TYPING 1. Not acknowledged; it holds for 10 s unless alice says something else.",
                  .typing(Typing(from: "alice", state: .typing)), sequence: 16),
            entry("typing-group", "Typing", "alice stopped typing in `team`", g2c,
                  "On each member's device: OP TYPING, FROM `alice`, GROUP `team`, TYPING 0 (stopped).",
                  .typing(Typing(group: "team", from: "alice", state: .stopped)), sequence: 17),
            entry("typing-rate-limited", "Typing", "Negative ACK: typing too often", g2c,
                  "ACK of sequence 18 with RATE_LIMITED (302) and RETRY_AFTER: more typing signals than the gateway takes (section 6.13). Nothing was sent.",
                  .ack(.rateLimited(sequence: 18, retryAfter: 500, message: "at most 4 typing signals per second")), sequence: 0),
            // Receipts
            entry("read-receipt", "Receipts", "Read receipt from bob", c2g,
                  "READ_RECEIPT with TO `alice` (the sender) and MESSAGE_ID `m-0001`.",
                  .readReceipt(ReadReceipt(to: "alice", messageID: "m-0001")), sequence: 6),
            entry("read-receipt-ack", "Receipts", "ACK of the read receipt", g2c, "ACK of sequence 6.",
                  .ack(Ack(sequence: 6)), sequence: 0),
            entry("receipt-delivered", "Receipts", "Delivery receipt for alice", g2c,
                  "RECEIPT_KIND 1 (delivered): a device of bob ACKed `m-0001`. Alice's device ACKs it.",
                  .receiptNotice(ReceiptNotice(from: "bob", messageID: "m-0001", kind: .delivered, serverTime: serverTime)),
                  sequence: 5),
            entry("receipt-read", "Receipts", "Read receipt for alice", g2c, "RECEIPT_KIND 2 (read).",
                  .receiptNotice(ReceiptNotice(from: "bob", messageID: "m-0001", kind: .read, serverTime: serverTime + 5000)),
                  sequence: 6),
            // Presence
            entry("presence-watch", "Presence", "PRESENCE_WATCH bob and carol", c2g,
                  "A container listing two USER_ID items.",
                  .presenceWatch(PresenceWatch(users: ["bob", "carol"])), sequence: 7),
            entry("presence-watch-ack", "Presence", "ACK of the PRESENCE_WATCH", g2c, "ACK of sequence 7.",
                  .ack(Ack(sequence: 7)), sequence: 0),
            entry("presence-online", "Presence", "PRESENCE: bob online", g2c, "Bob's device `phone-2` is online. Not acknowledged.",
                  .presence(PresenceNotice(user: "bob", device: "phone-2", status: .online)), sequence: 7),
            entry("presence-offline", "Presence", "PRESENCE: carol offline", g2c, "Carol's `laptop` is offline, last seen at LAST_SEEN.",
                  .presence(PresenceNotice(user: "carol", device: "laptop", status: .offline, lastSeen: serverTime - 60_000)),
                  sequence: 8),
            entry("presence-unwatch", "Presence", "PRESENCE_UNWATCH carol", c2g, "Stop watching carol.",
                  .presenceUnwatch(PresenceUnwatch(users: ["carol"])), sequence: 8),
            // Location
            entry("location-share-start", "Location", "LOCATION_SHARE_START with bob for one hour", c2g,
                  "DURATION 3600 s and a container with the audience.",
                  .locationShareStart(LocationShareStart(audience: ["bob"], duration: 3600)), sequence: 9),
            entry("location-update", "Location", "LOCATION_UPDATE", c2g,
                  "LAT/LON as IEEE 754 binary64, TST in Unix seconds, and the optional ACC, ALT, VEL, COG, BATT.",
                  .locationUpdate(LocationUpdate(location: location)), sequence: 10),
            entry("location-update-ack", "Location", "ACK of the LOCATION_UPDATE", g2c, "ACK of sequence 10.",
                  .ack(Ack(sequence: 10)), sequence: 0),
            entry("location-watch", "Location", "LOCATION_WATCH alice (from bob)", c2g, "Bob watches alice's location.",
                  .locationWatch(LocationWatch(users: ["alice"])), sequence: 11),
            entry("location-notice", "Location", "LOCATION: alice's position (to bob)", g2c, "Not acknowledged.",
                  .location(LocationNotice(user: "alice", device: "phone-1", location: location)), sequence: 9),
            entry("location-share-stop", "Location", "LOCATION_SHARE_STOP", c2g, "Empty but for the OP item.",
                  .locationShareStop(LocationShareStop()), sequence: 12),
            entry("location-unwatch", "Location", "LOCATION_UNWATCH alice", c2g, "Bob stops watching.",
                  .locationUnwatch(LocationUnwatch(users: ["alice"])), sequence: 12),
            // Pub/sub
            entry("subscribe", "Pub/sub", "SUBSCRIBE two filters", c2g,
                  "A container of records CONTAINER{TOPIC, QOS}: `im/t/room-1/#` at QoS 1 and `im/t/secret/#` at QoS 2.",
                  .subscribe(Subscribe(subscriptions: [.init(filter: "im/t/room-1/#", qos: .atLeastOnce), .init(filter: "im/t/secret/#", qos: .exactlyOnce)])),
                  sequence: 13),
            entry("subscribe-ack", "Pub/sub", "ACK of the SUBSCRIBE with results", g2c,
                  "One record per filter, in order: granted QoS 1; refused with FORBIDDEN (203).",
                  .ack(Ack(sequence: 13, subscriptions: [.init(filter: "im/t/room-1/#", outcome: .granted(.atLeastOnce)),
                                                         .init(filter: "im/t/secret/#", outcome: .refused(.forbidden))])),
                  sequence: 0),
            entry("subscribe-ack-broker-refused", "Pub/sub", "ACK of a SUBSCRIBE the broker refused", g2c,
                  "A filter deeper than the broker takes: INVALID_TOPIC (303) with the broker's reason as ERROR_MESSAGE in the record.",
                  .ack(Ack(sequence: 16, subscriptions: [.init(filter: "im/t/a/b/c/d/e/f/g", outcome: .refused(.invalidTopic),
                                                               reason: "the broker refused it: Topic Filter invalid (0x8F)")])),
                  sequence: 0),
            entry("publish", "Pub/sub", "PUBLISH to a room", c2g, "DATA with OP PUBLISH, TOPIC, QOS 1 and a JSON PAYLOAD.",
                  .publish(Publish(topic: "im/t/room-1/chat", payload: ByteBuffer(string: #"{"hi":1}"#), qos: .atLeastOnce)), sequence: 14),
            entry("publish-ack", "Pub/sub", "ACK of the PUBLISH", g2c, "The broker accepted it.",
                  .ack(Ack(sequence: 14)), sequence: 0),
            entry("publish-incoming", "Pub/sub", "Incoming PUBLISH", g2c, "A message matching a subscription, retained, with SERVER_TIME. The device ACKs it.",
                  .publish(Publish(topic: "im/t/room-1/topic", payload: ByteBuffer(string: "Lunch at noon"), qos: .atLeastOnce, retain: true, serverTime: serverTime)),
                  sequence: 10),
            entry("unsubscribe", "Pub/sub", "UNSUBSCRIBE", c2g, "A container of TOPIC items.",
                  .unsubscribe(Unsubscribe(filters: ["im/t/room-1/#"])), sequence: 15),
            // Session and errors
            entry("kick-taken-over", "Session", "KICK: session taken over", g2c,
                  "ERROR_CODE SESSION_TAKEN_OVER (207): the same device logged in elsewhere. The gateway closes; do not reconnect automatically.",
                  .kick(Kick(reason: .sessionTakenOver, message: "phone-1 logged in on another connection")), sequence: 11),
            entry("kick-shutdown", "Session", "KICK: server shutting down", g2c,
                  "SERVER_SHUTTING_DOWN (501): reconnect with back-off.",
                  .kick(Kick(reason: .serverShuttingDown)), sequence: 12),
            entry("kick-token-expired", "Session", "KICK: token expired", g2c,
                  "TOKEN_EXPIRED (202): the session's token expired (plus the gateway's leeway) and no TOKEN_REFRESH was ACKed in time. The gateway closes; log in again with a new token.",
                  .kick(Kick(reason: .tokenExpired, message: "token expired")), sequence: 13),
            entry("error-bad-crc", "Errors", "ERROR after a frame with a bad CRC", g2c,
                  "BAD_CRC (102), REF_SEQUENCE of the refused frame. Then the gateway closes the connection.",
                  .error(ErrorNotice(.badChecksum(announced: 0x0BAD_0BAD, computed: 0x6A1B_6F12), refSequence: 3)), sequence: 13),
            entry("not-logged-in-nack", "Errors", "Negative ACK: not logged in", g2c,
                  "A chat message before LOGIN: ACK with NOT_LOGGED_IN (200). The connection stays open.",
                  .ack(.refusing(sequence: 3, code: .notLoggedIn)), sequence: 0),
            // Seed-shaped CONTROL: no OP, the first naming item in item order decides.
            seedControl("control-implied-error", "CONTROL without OP: ERROR_CODE first",
                        "No OP item. ERROR_CODE is the first naming item in the frame (section 4), so this is an ERROR (AUTH_FAILED, 201); the USER_ID after it is ignored.",
                        items: [.errorCode, .userID], message: .error(ErrorNotice(code: .authFailed))),
            seedControl("control-implied-login-ok", "CONTROL without OP: USER_ID first",
                        "The same two items in the other order: USER_ID comes first, so this is a LOGIN_OK for `alice`; ERROR_CODE is not one of its items and is ignored.",
                        items: [.userID, .errorCode], message: .loginOK(LoginOK(userID: "alice"))),
        ]
    }

    /// A CONTROL frame without OP holding USER_ID `alice` and ERROR_CODE 201 in the order of
    /// `items`, as a seed-era peer would write it; the typed API writes OP instead.
    static func seedControl(_ name: String, _ title: String, _ description: String, items: [IMTag], message: IMMessage) -> Entry {
        var writer = TLVWriter()
        for tag in items {
            if tag == .userID { writer.write(.userID, string: "alice") } else { writer.write(.errorCode, integer: IMErrorCode.authFailed.rawValue) }
        }
        return Entry(name: name, section: "Seed-shaped CONTROL", title: title, direction: g2c, description: description,
                     frame: IMFrame(header: IMFrameHeader(type: .control, sequence: 2, timestamp: time, sessionID: 1), body: writer.buffer),
                     message: message, canonical: false)
    }
}
