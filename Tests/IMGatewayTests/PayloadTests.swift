import Foundation
import IMGateway
import IMWire
import NIOCore
import Testing

@Suite("MQTT payloads")
struct PayloadTests {
    static let serverTime: UInt64 = 1_735_689_600_123

    static func json(_ value: some Encodable) -> String { String(decoding: PayloadCodec.encode(value), as: UTF8.self) }

    // MARK: Chat

    @Test("a text chat reads as operators expect")
    func chatShape() {
        let send = ChatSend(to: "bob", messageID: "m-0001", content: .text("Hello, Bob! 👋"))
        let payload = ChatPayload(send: send, from: "alice", serverTime: Self.serverTime)
        #expect(
            Self.json(payload)
                == #"{"from":"alice","id":"m-0001","text":"Hello, Bob! 👋","to":"bob","ts":1735689600123,"type":"text"}"#)
    }

    @Test("chat becomes the delivery IMWire builds from the same message")
    func chatRoundTrip() throws {
        let sends = [
            ChatSend(to: "bob", messageID: "m-1", content: .text("hi")),
            ChatSend(to: "bob", messageID: "m-2", content: .text("twice"), qos: .exactlyOnce, resend: true),
            ChatSend(
                to: "bob", messageID: "m-3", content: IMContent(tag: .image, value: ByteBuffer(bytes: [0, 1, 2, 0xFF])),
                extensions: [
                    TLVItem(tag: 0xF000, value: ByteBuffer(string: "a/b")), TLVItem(tag: 0xFFFE, value: ByteBuffer()),
                ]),
            ChatSend(to: "bob", messageID: "m-4", content: IMContent(tag: .custom, value: ByteBuffer(string: #"{"url":"x"}"#))),
        ]
        for send in sends {
            let payload = ChatPayload(send: send, from: "alice", serverTime: Self.serverTime)
            let decoded = try PayloadCodec.decode(ChatPayload.self, from: PayloadCodec.encode(payload))
            #expect(decoded == payload)
            #expect(try decoded.delivery() == ChatDelivery(send, from: "alice", serverTime: Self.serverTime))
            #expect(try decoded.delivery(resend: true).resend)
        }
    }

    @Test("non-text content is base64 in data, with the tag's name as type; QoS 2 and extensions are shown")
    func chatBinaryShape() {
        let send = ChatSend(
            to: "bob", messageID: "m-3", content: IMContent(tag: .voice, value: ByteBuffer(bytes: [1, 2, 3])), qos: .exactlyOnce,
            extensions: [TLVItem(tag: 0xF001, value: ByteBuffer(bytes: [9]))])
        #expect(
            Self.json(ChatPayload(send: send, from: "alice", serverTime: 5))
                == #"{"data":"AQID","ext":[{"data":"CQ==","tag":61441}],"from":"alice","id":"m-3","qos":2,"to":"bob","ts":5,"type":"voice"}"#)
        #expect(ChatPayload.typeName(of: .fileContent) == "file_content")
        #expect(ChatPayload.tag(ofType: "location_card") == .locationCard)
        #expect(ChatPayload.tag(ofType: "TEXT") == nil)
    }

    @Test("a chat payload with bad fields is refused with the field named")
    func chatInvalid() {
        let good = ChatPayload(id: "m", from: "alice", to: "bob", ts: 1, type: "text", text: "hi")
        var payload = good
        payload.from = "a/b"
        #expect(throws: PayloadError.invalidField("from", value: "a/b")) { try payload.delivery() }
        payload = good
        payload.id = ""
        #expect(throws: PayloadError.invalidField("id", value: "")) { try payload.delivery() }
        payload = good
        payload.type = "hologram"
        #expect(throws: PayloadError.invalidField("type", value: "hologram")) { try payload.delivery() }
        payload = good
        payload.type = "image"
        #expect(throws: PayloadError.invalidField("data", value: "(absent)")) { try payload.delivery() }
        payload.data = "not base64!"
        #expect(throws: PayloadError.invalidField("data", value: "not base64!")) { try payload.delivery() }
        payload = good
        payload.qos = 3
        #expect(throws: PayloadError.invalidField("qos", value: "3")) { try payload.delivery() }
        payload = good
        payload.ext = [.init(tag: 0x1001, data: "")]
        #expect(throws: PayloadError.invalidField("ext[0].tag", value: "4097")) { try payload.delivery() }
    }

    // MARK: Presence

    @Test("presence reads as operators expect and becomes PRESENCE notices")
    func presence() throws {
        let online = PresencePayload(status: .online, device: "phone-1", ts: Self.serverTime, gateway: "gw-1")
        #expect(Self.json(online) == #"{"device":"phone-1","gateway":"gw-1","status":"online","ts":1735689600123}"#)
        let decoded = try PayloadCodec.decode(PresencePayload.self, from: PayloadCodec.encode(online))
        #expect(decoded == online)
        #expect(try decoded.notice(user: "alice") == PresenceNotice(user: "alice", device: "phone-1", status: .online))
        let offline = PresencePayload(status: .offline, device: "phone-1", ts: 42)
        #expect(Self.json(offline) == #"{"device":"phone-1","status":"offline","ts":42}"#)
        #expect(
            try offline.notice(user: "alice") == PresenceNotice(user: "alice", device: "phone-1", status: .offline, lastSeen: 42))
        #expect(throws: PayloadError.invalidField("device", value: "a+b")) {
            try PresencePayload(status: .online, device: "a+b", ts: 1).notice(user: "alice")
        }
        #expect(throws: PayloadError.self) {
            try PayloadCodec.decode(PresencePayload.self, from: Array(#"{"device":"d","status":"away","ts":1}"#.utf8))
        }
    }

    // MARK: Location

    @Test("location is OwnTracks-shaped and round-trips to the LOCATION notice")
    func location() throws {
        let fix = IMLocation(lat: 52.520008, lon: 13.404954, tst: 1_735_689_590, acc: 12, alt: 34, vel: 5, cog: 270, batt: 87)
        let payload = LocationPayload(update: LocationUpdate(location: fix), user: "alice", device: "phone-1")
        #expect(
            Self.json(payload)
                == #"{"_type":"location","acc":12,"alt":34,"batt":87,"cog":270,"device":"phone-1","lat":52.520008,"lon":13.404954,"tst":1735689590,"user":"alice","vel":5}"#
        )
        let decoded = try PayloadCodec.decode(LocationPayload.self, from: PayloadCodec.encode(payload))
        #expect(decoded == payload)
        #expect(try decoded.notice() == LocationNotice(user: "alice", device: "phone-1", location: fix))

        let minimal = LocationPayload(location: IMLocation(lat: -90, lon: 180, tst: 0), user: "bob")
        #expect(Self.json(minimal) == #"{"_type":"location","lat":-90,"lon":180,"tst":0,"user":"bob"}"#)
        #expect(try PayloadCodec.decode(LocationPayload.self, from: PayloadCodec.encode(minimal)).notice().device == nil)
    }

    @Test("an OwnTracks message of another type, or values out of range, are refused")
    func locationInvalid() {
        #expect(throws: PayloadError.invalidField("_type", value: "transition")) {
            try PayloadCodec.decode(
                LocationPayload.self, from: Array(#"{"_type":"transition","lat":1,"lon":2,"tst":3,"user":"a"}"#.utf8))
        }
        #expect(throws: PayloadError.self) {  // batt does not fit a u8
            try PayloadCodec.decode(
                LocationPayload.self, from: Array(#"{"_type":"location","lat":1,"lon":2,"tst":3,"user":"a","batt":300}"#.utf8))
        }
        let base = LocationPayload(location: IMLocation(lat: 0, lon: 0, tst: 0), user: "alice")
        var payload = base
        payload.lat = 90.5
        #expect(throws: PayloadError.invalidField("lat", value: "90.5")) { try payload.notice() }
        payload = base
        payload.lon = .nan
        #expect(throws: PayloadError.invalidField("lon", value: "nan")) { try payload.notice() }
        payload = base
        payload.cog = 360
        #expect(throws: PayloadError.invalidField("cog", value: "360")) { try payload.notice() }
        payload = base
        payload.batt = 101
        #expect(throws: PayloadError.invalidField("batt", value: "101")) { try payload.notice() }
        payload = base
        payload.user = "$SYS"
        #expect(throws: PayloadError.invalidField("user", value: "$SYS")) { try payload.notice() }
    }

    // MARK: Receipts and stats

    @Test("receipts read as operators expect and become RECEIPT_NOTICE")
    func receipt() throws {
        let read = ReceiptPayload(kind: .read, id: "m-0001", by: "bob", device: "phone-2", ts: 1_735_689_605_123)
        #expect(Self.json(read) == #"{"by":"bob","device":"phone-2","id":"m-0001","kind":"read","ts":1735689605123}"#)
        let decoded = try PayloadCodec.decode(ReceiptPayload.self, from: PayloadCodec.encode(read))
        #expect(decoded == read)
        #expect(try decoded.notice() == ReceiptNotice(from: "bob", messageID: "m-0001", kind: .read, serverTime: 1_735_689_605_123))
        let delivered = ReceiptPayload(kind: .delivered, id: "m-1", by: "bob", ts: 7)
        #expect(try delivered.notice().kind == .delivered)
        #expect(throws: PayloadError.invalidField("by", value: "b#b")) {
            try ReceiptPayload(kind: .read, id: "m", by: "b#b", ts: 1).notice()
        }
    }

    @Test("a delivered receipt for several messages lists them in ids and becomes one notice each")
    func coalescedReceipt() throws {
        let many = ReceiptPayload(kind: .delivered, ids: ["m-1", "m-2", "m-3"], by: "bob", device: "phone", ts: 9)
        #expect(Self.json(many) == #"{"by":"bob","device":"phone","id":"m-1","ids":["m-1","m-2","m-3"],"kind":"delivered","ts":9}"#)
        let decoded = try PayloadCodec.decode(ReceiptPayload.self, from: PayloadCodec.encode(many))
        #expect(try decoded.notices().map(\.messageID) == ["m-1", "m-2", "m-3"])
        #expect(try decoded.notices().allSatisfy { $0.from == "bob" && $0.kind == .delivered && $0.serverTime == 9 })
        // One id: no `ids` key, as before.
        #expect(!Self.json(ReceiptPayload(kind: .delivered, ids: ["m-1"], by: "bob", ts: 9)).contains("ids"))
        // A bad id anywhere in the list refuses the whole payload.
        let bad = try PayloadCodec.decode(ReceiptPayload.self, from: Array(#"{"by":"bob","id":"m-1","ids":["m-1",""],"kind":"delivered","ts":1}"#.utf8))
        #expect(throws: PayloadError.invalidField("id", value: "")) { try bad.notices() }
    }

    @Test("stats use snake_case keys")
    func stats() throws {
        let stats = StatsPayload(
            gateway: "gw-1", ts: 1, connections: 3, loggedIn: 2, sessions: 2, messagesIn: 10, messagesOut: 12, uptimeSeconds: 3600,
            version: "0.1.0")
        #expect(
            Self.json(stats)
                == #"{"connections":3,"gateway":"gw-1","logged_in":2,"messages_in":10,"messages_out":12,"sessions":2,"ts":1,"uptime_s":3600,"version":"0.1.0"}"#
        )
        #expect(try PayloadCodec.decode(StatsPayload.self, from: PayloadCodec.encode(stats)) == stats)
    }

    @Test("a disconnect names when it was asked for, and ends only the sessions there by then; one without a time (an older gateway's) ends them all")
    func disconnect() throws {
        let asked = DisconnectPayload(user: "bob", reason: "stolen token", at: 1_000)
        #expect(Self.json(asked) == #"{"at":1000,"reason":"stolen token","user":"bob"}"#)
        #expect(try PayloadCodec.decode(DisconnectPayload.self, from: PayloadCodec.encode(asked)) == asked)
        #expect(asked.ends(sessionRegisteredAt: 999) && asked.ends(sessionRegisteredAt: 1_000))
        #expect(!asked.ends(sessionRegisteredAt: 1_001), "a login after the request stays, however late the request arrives")
        let older = try PayloadCodec.decode(DisconnectPayload.self, from: Array(#"{"device":"phone","reason":"r","user":"bob"}"#.utf8))
        #expect(older.at == nil && older.ends(sessionRegisteredAt: .max))
    }

    // MARK: Codec

    @Test("decode errors name what is wrong")
    func decodeErrors() {
        #expect(throws: PayloadError.malformed("not JSON")) { try PayloadCodec.decode(ReceiptPayload.self, from: Array("nope".utf8)) }
        #expect(throws: PayloadError.malformed("no id")) {
            try PayloadCodec.decode(ReceiptPayload.self, from: Array(#"{"kind":"read","by":"b","ts":1}"#.utf8))
        }
        let error = #expect(throws: PayloadError.self) {
            try PayloadCodec.decode(ReceiptPayload.self, from: Array(#"{"kind":"read","id":"m","by":"b","ts":"soon"}"#.utf8))
        }
        #expect(error?.description.contains("ts") == true)
    }

    @Test("slashes are not escaped and keys are sorted")
    func encoding() {
        struct Sample: Encodable { var z = "a/b"; var a = 1 }
        #expect(Self.json(Sample()) == #"{"a":1,"z":"a/b"}"#)
        #expect(PayloadCodec.contentType == "application/json")
    }
}
