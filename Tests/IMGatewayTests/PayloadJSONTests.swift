import Foundation
@testable import IMGateway
import Testing

/// The chat path's JSON, written and read directly, against Foundation's encoder and decoder:
/// the same bytes out, the same values (or the same refusal) in.
@Suite("Fixed-shape payload JSON")
struct PayloadJSONTests {
    /// Every control character, the characters JSON escapes, a slash, non-ASCII and a
    /// scalar outside the BMP.
    static let awkward = String(decoding: (0..<0x20).map { UInt8($0) }, as: UTF8.self) + #"quote " backslash \ slash / é 中 😀"#

    static let chats: [ChatPayload] = [
        ChatPayload(id: "m-0001", from: "alice", to: "bob", ts: 1_735_689_600_123, type: "text", text: "Hello, Bob! 👋"),
        ChatPayload(id: "", from: "a", to: "b", ts: 0, type: "text", text: ""),
        ChatPayload(id: awkward, from: "alice", to: "bob", ts: .max, type: "text", text: awkward),
        ChatPayload(
            id: "m-3", from: "alice", to: "bob", ts: 42, type: "image", data: "AAEC/w==", qos: 2,
            ext: [.init(tag: 0xF000, data: "YS9i"), .init(tag: 0xFFFE, data: "")]),
        ChatPayload(id: "m-4", from: "alice", to: "bob", ts: 7, type: "custom", data: "", qos: -1, ext: []),
        ChatPayload(id: "m-5", from: "alice", to: "bob", ts: 8, type: "text", text: "standup", group: "team"),
        ChatPayload(id: "m-6", from: "alice", to: "bob", ts: 9, type: "text", text: "hi", carbon: true),
        ChatPayload(id: "m-7", from: "alice", to: "alice", ts: 9, type: "text", text: "hi all", group: "team", carbon: false),
    ]

    static let receipts: [ReceiptPayload] = [
        ReceiptPayload(kind: .delivered, id: "m-0001", by: "bob", device: "phone", ts: 1_735_689_605_123),
        ReceiptPayload(kind: .read, ids: ["m-1", "m-2", awkward], by: "bob", ts: 0),
        ReceiptPayload(kind: .delivered, id: awkward, by: "bob", device: awkward, ts: .max),
    ]

    @Test("chat payloads are written byte for byte as Foundation writes them", arguments: chats)
    func chatBytes(payload: ChatPayload) {
        #expect(payload.json() == PayloadCodec.foundationEncode(payload))
        #expect(PayloadCodec.encode(payload) == payload.json())
    }

    @Test("receipt payloads are written byte for byte as Foundation writes them", arguments: receipts)
    func receiptBytes(payload: ReceiptPayload) {
        #expect(payload.json() == PayloadCodec.foundationEncode(payload))
    }

    @Test("what is written is read back by the fast reader itself, not by the fallback", arguments: chats)
    func chatFastRead(payload: ChatPayload) throws {
        #expect(ChatPayload(fastJSON: payload.json()) == payload)
        #expect(try PayloadCodec.decode(ChatPayload.self, from: payload.json()) == payload)
    }

    @Test("receipts are read back by the fast reader", arguments: receipts)
    func receiptFastRead(payload: ReceiptPayload) {
        #expect(ReceiptPayload(fastJSON: payload.json()) == payload)
    }

    @Test("random strings are escaped as Foundation escapes them and read back")
    func randomStrings() {
        // A linear congruential sequence: the same strings every run.
        var state: UInt64 = 0x1D_C0DE
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 17
        }
        let pool: [Unicode.Scalar] = (0..<0x80).compactMap(Unicode.Scalar.init) + ["é", "ß", "中", "😀", "\u{2028}", "\u{FEFF}", "\u{10FFFF}"]
        for _ in 0..<500 {
            let length = Int(next() % 24)
            var text = ""
            for _ in 0..<length { text.unicodeScalars.append(pool[Int(next() % UInt64(pool.count))]) }
            let payload = ChatPayload(id: text, from: "alice", to: "bob", ts: next(), type: "text", text: text)
            #expect(payload.json() == PayloadCodec.foundationEncode(payload), "\(text.debugDescription)")
            #expect(ChatPayload(fastJSON: payload.json()) == payload, "\(text.debugDescription)")
        }
    }

    /// JSON other writers produce: whitespace, any key order, escapes Foundation does not
    /// write.
    static let readable: [String] = [
        #" { "type" : "text" , "ts" : 5 , "to" : "bob" , "text" : "hi" , "id" : "m" , "from" : "alice" } "#,
        #"{"from":"alice","id":"m","text":"\u00e9\/\ud83d\ude00\"\\\b\f\n\r\t","to":"bob","ts":0,"type":"text"}"#,
        #"{"from":"alice","id":"m","data":"AA==","ext":[ {"tag":61440,"data":"AA=="} ],"qos":2,"to":"bob","ts":1,"type":"image"}"#,
    ]

    @Test("other writers' JSON is read as Foundation reads it", arguments: readable)
    func otherWriters(json: String) throws {
        let bytes = Array(json.utf8)
        let fast = try #require(ChatPayload(fastJSON: bytes))
        #expect(fast == (try PayloadCodec.foundationDecode(ChatPayload.self, from: bytes)))
    }

    /// JSON the fast reader leaves to Foundation: valid but unusual, or invalid.
    static let unusual: [String] = [
        #"{"from":"alice","id":"m","to":"bob","ts":1,"type":"text","text":"hi","extra":{"a":[1,null]}}"#,
        #"{"from":"alice","id":"m","to":"bob","ts":1,"type":"text","text":null}"#,
        #"{"from":"alice","id":"m","to":"bob","ts":1.0,"type":"text"}"#,
        #"{"from":"alice","id":"m","to":"bob","ts":1e3,"type":"text"}"#,
        #"{"from":"alice","id":"m","to":"bob","ts":-1,"type":"text"}"#,
        #"{"from":"alice","id":"m","to":"bob","ts":01,"type":"text"}"#,
        #"{"from":"alice","id":"m","to":"bob","ts":18446744073709551616,"type":"text"}"#,
        #"{"from":"alice","from":"eve","id":"m","to":"bob","ts":1,"type":"text"}"#,
        #"{"from":"alice","id":"\ud83d","to":"bob","ts":1,"type":"text"}"#,
        #"{"from":"alice","id":"m","to":"bob","ts":1,"type":"text"} trailing"#,
        #"{"from":"alice","id":"m","to":"bob","ts":1,"type":"text",}"#,
        #"{"fr\u006fm":"alice","id":"m","to":"bob","ts":1,"type":"text"}"#,
        #"{"id":"m","to":"bob","ts":1,"type":"text"}"#,
        #"["from"]"#,
        "",
        "{\"from\":\"al\u{1}ice\",\"id\":\"m\",\"to\":\"bob\",\"ts\":1,\"type\":\"text\"}",
    ]

    @Test("what the fast reader does not take is decided by Foundation", arguments: unusual)
    func unusualJSON(json: String) {
        let bytes = Array(json.utf8)
        #expect(ChatPayload(fastJSON: bytes) == nil)
        let viaCodec = Result { () throws(PayloadError) in try PayloadCodec.decode(ChatPayload.self, from: bytes) }
        let viaFoundation = Result { () throws(PayloadError) in try PayloadCodec.foundationDecode(ChatPayload.self, from: bytes) }
        #expect(viaCodec == viaFoundation)
    }

    @Test("invalid UTF-8 in a string is left to Foundation")
    func invalidUTF8() {
        var bytes = Array(#"{"from":"alice","id":"m","to":"bob","ts":1,"type":"text","text":"x"}"#.utf8)
        bytes[bytes.count - 3] = 0xFF
        #expect(ChatPayload(fastJSON: bytes) == nil)
        #expect(throws: PayloadError.self) { try PayloadCodec.decode(ChatPayload.self, from: bytes) }
    }
}
