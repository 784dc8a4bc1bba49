import IMWire
import NIOCore
import Testing

@Suite("Typed messages")
struct MessageTests {
    static let names = VectorCatalog.entries.map(\.name)

    @Test("every message survives encoder and decoder", arguments: names)
    func roundTrip(name: String) throws {
        let entry = try #require(VectorCatalog.entries.first { $0.name == name })
        let message = VectorCatalog.canonical(entry.message)
        let frame = message.frame(sequence: 77, timestamp: 5, sessionID: 9, compressType: .zlib)
        var wire = try IMFrameEncoder().encode(frame)
        var decoder = IMFrameDecoder()
        let decoded = try #require(try decoder.decode(buffer: &wire))
        #expect(try IMMessage(frame: decoded) == message)
        #expect(decoded.header.sessionID == 9)
        if case .ack(let ack) = message {
            #expect(decoded.header.sequence == ack.sequence)
        } else {
            #expect(decoded.header.sequence == 77)
        }
        #expect(entry.message.frameType == entry.frame.header.type)
        if let body = entry.message.body {
            // The per-type initialiser agrees with the dispatcher.
            let typed = try type(of: body).init(frame: decoded)
            #expect(IMMessage.operationOf(typed) == entry.message.operation)
        }
    }

    @Test("CONTROL frames carry OP first; implied operations are written without it")
    func operationItem() throws {
        let login = LoginRequest(token: "t").body()
        #expect(try TLVFields(parsing: login).items.first?.tag == .operation)
        let chat = ChatSend(to: "bob", messageID: "m", content: .text("x")).body()
        #expect(try TLVFields(parsing: chat)[.operation] == nil)
        let receipt = ReadReceipt(to: "bob", messageID: "m").body()
        #expect(try TLVFields(parsing: receipt)[.operation] == nil)
        // Accepted with an explicit OP as well.
        var writer = TLVWriter()
        writer.write(.operation, integer: IMOperation.chat.rawValue)
        ChatSend(to: "bob", messageID: "m", content: .text("x")).write(to: &writer)
        let frame = IMFrame(type: .data, sequence: 1, timestamp: 0, sessionID: 1, body: writer.buffer)
        #expect(try IMMessage(frame: frame) == .chat(ChatSend(to: "bob", messageID: "m", content: .text("x"))))
    }

    static let seedShapes: [(String, @Sendable (inout TLVWriter) -> Void, IMOperation)] = [
        ("VERSION_REQUEST", { $0.write(.versionRequest, version: .current, features: .zlib) }, .hello),
        ("VERSION_RESPONSE", { $0.write(.versionResponse, version: .current, features: []) }, .helloOK),
        ("AUTH_TOKEN", { $0.write(.authToken, string: "jwt") }, .login),
        ("USER_ID", { $0.write(.userID, string: "alice") }, .loginOK),
        ("ERROR_CODE", { $0.write(.errorCode, integer: UInt16(201)) }, .error),
    ]

    @Test("CONTROL frames without OP are recognised by their characteristic tag", arguments: seedShapes)
    func impliedControl(tag: String, write: @Sendable (inout TLVWriter) -> Void, expected: IMOperation) throws {
        var writer = TLVWriter()
        write(&writer)
        let frame = IMFrame(type: .control, sequence: 1, timestamp: 0, sessionID: 1, body: writer.buffer)
        #expect(try IMMessage(frame: frame).operation == expected)
    }

    static let itemOrders: [([IMTag], IMOperation)] = [
        ([.errorCode, .userID], .error),
        ([.userID, .errorCode], .loginOK),
        ([.versionRequest, .authToken], .hello),
        ([.authToken, .versionRequest], .login),
        ([IMTag(0x7777), .errorCode, .versionResponse], .error),
    ]

    @Test("without OP, the first naming item in item order decides a CONTROL frame's operation", arguments: itemOrders)
    func impliedControlItemOrder(tags: [IMTag], expected: IMOperation) throws {
        var writer = TLVWriter()
        for tag in tags {
            switch tag {
            case .versionRequest, .versionResponse: writer.write(tag, version: .current, features: [])
            case .errorCode: writer.write(tag, integer: IMErrorCode.authFailed.rawValue)
            default: writer.write(tag, string: "alice")
            }
        }
        let fields = try TLVFields(parsing: writer.buffer)
        #expect(try IMOperation.of(type: .control, fields: fields) == expected)
    }

    @Test("every CONTROL message the typed API writes starts with OP, so item order never decides", arguments: names)
    func controlWritesOperationFirst(name: String) throws {
        let entry = try #require(VectorCatalog.entries.first { $0.name == name })
        guard let body = entry.message.body, type(of: body).frameType == .control else { return }
        let first = try #require(try TLVFields(parsing: body.body()).items.first)
        #expect(first.tag == .operation)
        #expect(try first.integer(as: UInt16.self) == type(of: body).operation.rawValue)
    }

    @Test("operations must match the frame type")
    func operationFrameType() throws {
        var writer = TLVWriter()
        writer.write(.operation, integer: IMOperation.publish.rawValue)
        let control = IMFrame(type: .control, sequence: 1, timestamp: 0, sessionID: 1, body: writer.buffer)
        #expect(throws: IMWireError.unknownOperation(type: .control, operation: 0x0042)) { try IMMessage(frame: control) }
        let empty = IMFrame(type: .data, sequence: 1, timestamp: 0, sessionID: 1)
        #expect(throws: IMWireError.unknownOperation(type: .data, operation: nil)) { try IMMessage(frame: empty) }
        let login = LoginRequest(token: "t").frame(sequence: 1, timestamp: 0, sessionID: 1)
        #expect(throws: IMWireError.unexpectedOperation(expected: .logout, actual: .login)) { try Logout(frame: login) }
        #expect(throws: IMWireError.unexpectedFrameType(expected: .data, actual: .control)) { try ChatSend(frame: login) }
    }

    static let refusals: [(String, IMMessage, IMErrorCode)] = [
        ("user id with /", .chat(ChatSend(to: "a/b", messageID: "m", content: .text("x"))), .invalidUserID),
        ("empty user id", .presenceWatch(PresenceWatch(users: [""])), .invalidUserID),
        ("long message id", .chat(ChatSend(to: "b", messageID: String(repeating: "m", count: 129), content: .text("x"))), .badRequest),
        ("device id with #", .login(LoginRequest(token: "t", deviceID: "a#")), .invalidUserID),
        ("empty watch list", .presenceWatch(PresenceWatch(users: [])), .badRequest),
        ("latitude 91", .locationUpdate(LocationUpdate(location: IMLocation(lat: 91, lon: 0, tst: 0))), .badRequest),
        ("NaN longitude", .locationUpdate(LocationUpdate(location: IMLocation(lat: 0, lon: .nan, tst: 0))), .badRequest),
        ("battery 101", .locationUpdate(LocationUpdate(location: IMLocation(lat: 0, lon: 0, tst: 0, batt: 101))), .badRequest),
        ("zero duration", .locationShareStart(LocationShareStart(audience: ["b"], duration: 0)), .badRequest),
        ("empty topic", .publish(Publish(topic: "", payload: ByteBuffer())), .badRequest),
        ("empty refresh token", .tokenRefresh(TokenRefresh(token: "")), .badRequest),
        ("refresh token over 8192 bytes", .tokenRefresh(TokenRefresh(token: String(repeating: "t", count: 8193))), .badRequest),
    ]

    @Test("invalid values are refused with the right error code", arguments: refusals)
    func refusal(name: String, message: IMMessage, code: IMErrorCode) {
        let frame = message.frame(sequence: 1, timestamp: 0, sessionID: 1)
        #expect {
            try IMMessage(frame: frame)
        } throws: { error in
            guard let error = error as? IMWireError else { return false }
            return error.errorCode == code && !error.isFatal
        }
    }

    @Test("doubled content and unknown items")
    func contentRules() throws {
        var writer = TLVWriter()
        ChatSend(to: "bob", messageID: "m", content: .text("x")).write(to: &writer)
        writer.write(.image, bytes: [1])
        writer.write(IMTag(0x0999), bytes: [1, 2, 3])  // unknown: ignored
        let doubled = IMFrame(type: .data, sequence: 1, timestamp: 0, sessionID: 1, body: writer.buffer)
        #expect(throws: IMWireError.invalidField(.image, .duplicate)) { try IMMessage(frame: doubled) }

        var extended = TLVWriter()
        extended.write(.to, string: "bob")
        extended.write(.messageID, string: "m")
        extended.write(.voice, bytes: [9, 9])
        extended.write(IMTag(0x0999), bytes: [1])
        extended.write(IMTag(0xF001), string: "app")
        let frame = IMFrame(type: .data, sequence: 1, timestamp: 0, sessionID: 1, body: extended.buffer)
        guard case .chat(let chat) = try IMMessage(frame: frame) else { Issue.record("not a chat"); return }
        #expect(chat.content.tag == .voice)
        #expect(chat.extensions == [TLVItem(tag: 0xF001, value: ByteBuffer(string: "app"))])
        // A delivery built from the chat keeps content and application items.
        let delivery = ChatDelivery(chat, from: "alice", serverTime: 1)
        #expect(delivery.extensions == chat.extensions && delivery.content == chat.content)
    }

    @Test("subscription results and negative ACKs")
    func acks() throws {
        let ack = Ack(sequence: 13, subscriptions: [
            .init(filter: "im/t/a", outcome: .granted(.exactlyOnce)), .init(filter: "im/t/b", outcome: .refused(.invalidTopic)),
        ])
        #expect(try Ack(frame: ack.frame(timestamp: 0, sessionID: 1)) == ack)
        let nack = Ack.refusing(sequence: 4, code: .rateLimited, message: "slow down")
        #expect(nack.isNegative && !ack.isNegative)
        #expect(try Ack(frame: nack.frame(timestamp: 0, sessionID: 1)) == nack)
        #expect(Ack(sequence: 1).body().readableBytes == 0)
    }

    @Test("TOKEN_REFRESH is named by OP only: the same AUTH_TOKEN without OP is a LOGIN, and as DATA it is unknown")
    func tokenRefreshNaming() throws {
        let refresh = TokenRefresh(token: "jwt")
        let frame = refresh.frame(sequence: 16, timestamp: 0, sessionID: 1)
        #expect(try IMMessage(frame: frame) == .tokenRefresh(refresh))
        #expect(try TokenRefresh(frame: frame) == refresh)
        #expect(try TLVFields(parsing: frame.body).items.map(\.tag) == [.operation, .authToken])

        var bare = TLVWriter()
        refresh.write(to: &bare)
        let implied = IMFrame(type: .control, sequence: 16, timestamp: 0, sessionID: 1, body: bare.buffer)
        #expect(try IMMessage(frame: implied) == .login(LoginRequest(token: "jwt")))

        let data = IMFrame(type: .data, sequence: 16, timestamp: 0, sessionID: 1, body: frame.body)
        #expect(throws: IMWireError.unknownOperation(type: .data, operation: IMOperation.tokenRefresh.rawValue)) { try IMMessage(frame: data) }
        #expect(throws: IMWireError.unexpectedOperation(expected: .tokenRefresh, actual: .login)) { try TokenRefresh(frame: implied) }
    }

    @Test("TOKEN_EXPIRY: in LOGIN_OK after HEARTBEAT_INTERVAL and before REF_SEQUENCE, in an ACK after SERVER_TIME; absent, the bytes are those of before")
    func tokenExpiry() throws {
        let ok = LoginOK(userID: "alice", deviceID: "phone-1", serverTime: 1, heartbeatInterval: 30, tokenExpiry: 4_102_444_800_000, refSequence: 2)
        #expect(try TLVFields(parsing: ok.body()).items.map(\.tag)
            == [.operation, .userID, .deviceID, .serverTime, .heartbeatInterval, .tokenExpiry, .refSequence])
        #expect(try LoginOK(frame: ok.frame(sequence: 2, timestamp: 0, sessionID: 1)) == ok)
        var without = ok
        without.tokenExpiry = nil
        var expected = TLVWriter()
        expected.write(.operation, integer: IMOperation.loginOK.rawValue)
        expected.write(.userID, string: "alice")
        expected.write(.deviceID, string: "phone-1")
        expected.write(.serverTime, integer: UInt64(1))
        expected.write(.heartbeatInterval, integer: UInt16(30))
        expected.write(.refSequence, integer: UInt32(2))
        #expect(without.body() == expected.buffer)

        let ack = Ack.tokenRefreshed(sequence: 16, tokenExpiry: 4_102_448_400_000)
        #expect(ack == Ack(sequence: 16, tokenExpiry: 4_102_448_400_000) && !ack.isNegative)
        #expect(try Ack(frame: ack.frame(timestamp: 0, sessionID: 1)) == ack)
        let both = Ack(sequence: 3, messageID: "m", serverTime: 5, tokenExpiry: 6)
        #expect(try TLVFields(parsing: both.body()).items.map(\.tag) == [.messageID, .serverTime, .tokenExpiry])
        #expect(try Ack(frame: both.frame(timestamp: 0, sessionID: 1)) == both)

        var wrongSize = TLVWriter()
        wrongSize.write(.tokenExpiry, integer: UInt32(1))
        let bad = IMFrame(type: .ack, sequence: 1, timestamp: 0, sessionID: 1, body: wrongSize.buffer)
        #expect(throws: IMWireError.self) { try Ack(frame: bad) }
    }

    @Test("versions and features")
    func versions() throws {
        #expect(IMProtocolVersion(rawValue: 0x0102) == IMProtocolVersion(major: 1, minor: 2))
        #expect(IMProtocolVersion.current.rawValue == 0x0100)
        let hello = Hello(features: [.zlib, .pubSub], maxBodyLength: 4096)
        var wire = try IMFrameEncoder().encode(hello.frame(sequence: 1, timestamp: 0, sessionID: 1))
        var decoder = IMFrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &wire))
        #expect(try Hello(frame: frame) == hello)
        #expect(try Hello(frame: frame).features.contains(.zlib))
    }
}

extension IMMessage {
    static func operationOf(_ body: any IMMessageBody) -> IMOperation { type(of: body).operation }
}

@Suite("IMMessage.operation(of:)")
struct MessageOperationTests {
    @Test("the operation of a frame whose message is invalid: a LOGIN with a token over 8192 bytes is still a LOGIN")
    func operationOfInvalidMessage() throws {
        let login = LoginRequest(token: String(repeating: "t", count: 8193)).frame(sequence: 1, timestamp: 0, sessionID: 0)
        #expect(throws: IMWireError.self) { try IMMessage(frame: login) }
        #expect(IMMessage.operation(of: login) == .login)
        #expect(IMMessage.operation(of: LoginRequest(token: "").frame(sequence: 1, timestamp: 0, sessionID: 0)) == .login)
        #expect(IMMessage.operation(of: Logout().frame(sequence: 2, timestamp: 0, sessionID: 0)) == .logout)
        #expect(IMMessage.operation(of: IMFrame.heartbeat(sequence: 3, timestamp: 0)) == nil)
    }
}
