import CMosquitto
import IMWire
import Testing

@testable import IMGateway
@testable import IMGatewayConfig

@Suite("IMIdentifier")
struct IMIdentifierTests {
    @Test("accepts ordinary ids, including non-ASCII", arguments: ["alice", "phone-1", "a", "user.name@example.com", "Jörg", "李雷", "👋"])
    func accepts(_ id: String) throws {
        try IMIdentifier.validate(id, kind: .user)
        #expect(IMIdentifier.isValid(id))
    }

    @Test("refuses every forbidden character, wherever it stands", arguments: ["/", "+", "#", "$", "\u{0}", "\n", "\t", "\u{7F}", "\u{85}", "\u{1B}"])
    func refusesForbiddenCharacter(_ character: String) {
        for id in [character, "a\(character)", "\(character)a", "ab\(character)cd"] {
            #expect(throws: IMIdentifierError.forbiddenCharacter(.device, id, character.unicodeScalars.first!)) {
                try IMIdentifier.validate(id, kind: .device)
            }
            #expect(!IMIdentifier.isValid(id))
        }
    }

    @Test("refuses the empty id")
    func refusesEmpty() {
        #expect(throws: IMIdentifierError.empty(.user)) { try IMIdentifier.validate("", kind: .user) }
    }

    @Test("the limit is 64 bytes of UTF-8, not 64 characters")
    func byteLimit() throws {
        try IMIdentifier.validate(String(repeating: "a", count: 64), kind: .user)
        #expect(throws: IMIdentifierError.tooLong(.user, String(repeating: "a", count: 65), length: 65)) {
            try IMIdentifier.validate(String(repeating: "a", count: 65), kind: .user)
        }
        // "ü" is 2 bytes: 32 fit, 33 (66 bytes) do not, though only 33 characters.
        try IMIdentifier.validate(String(repeating: "ü", count: 32), kind: .user)
        #expect(throws: IMIdentifierError.tooLong(.user, String(repeating: "ü", count: 33), length: 66)) {
            try IMIdentifier.validate(String(repeating: "ü", count: 33), kind: .user)
        }
        // "李" is 3 bytes: 21 fit (63 bytes), 22 (66 bytes) do not.
        try IMIdentifier.validate(String(repeating: "李", count: 21), kind: .user)
        #expect(!IMIdentifier.isValid(String(repeating: "李", count: 22)))
    }

    @Test("errors map to INVALID_USER_ID and name the kind and value")
    func errorCodeAndMessage() {
        let error = IMIdentifierError.forbiddenCharacter(.device, "a/b", "/")
        #expect(error.errorCode == .invalidUserID)
        #expect(error.kind == .device)
        #expect(error.description.contains("device id \"a/b\""))
    }

    @Test("the characters refused besides / + # $ are exactly Unicode's controls (Cc) and non-characters")
    func refusedAreControlsAndNoncharacters() {
        var disagreements: [UInt32] = []
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value), !"/+#$".unicodeScalars.contains(scalar) else { continue }
            let expected = scalar.properties.generalCategory == .control || scalar.properties.isNoncharacterCodePoint
            if IMIdentifier.isForbidden(scalar) != expected { disagreements.append(value) }
        }
        #expect(disagreements.isEmpty, "differ at \(disagreements.prefix(10).map { String($0, radix: 16) })")
    }

    @Test("what brokers may refuse is what libmosquitto's own check refuses, for every scalar but NUL")
    func sameAsLibmosquitto() {
        var disagreements: [UInt32] = []
        for value in UInt32(1)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let utf8 = Array(String(scalar).utf8)
            let refused = utf8.withUnsafeBufferPointer { bytes in
                bytes.withMemoryRebound(to: CChar.self) { mosquitto_validate_utf8($0.baseAddress, Int32($0.count)) != 0 }
            }
            if IMIdentifier.isRefusedByBrokers(scalar) != refused { disagreements.append(value) }
        }
        #expect(disagreements.isEmpty, "differ at \(disagreements.prefix(10).map { String($0, radix: 16) })")
    }

    @Test("message ids: 1 to 128 bytes without what brokers refuse; / + # $ are fine")
    func messageIDs() {
        for valid in ["m-1", "a/b+c#d$e", String(repeating: "x", count: 128), "李雷👋"] {
            #expect(IMIdentifier.isValidMessageID(valid), "\(valid)")
        }
        for invalid in ["", String(repeating: "x", count: 129), "a\u{16}", "a\u{85}", "a" + String(Unicode.Scalar(0xFFFE)!)] {
            #expect(!IMIdentifier.isValidMessageID(invalid), "\(invalid.unicodeScalars.map(\.value))")
        }
    }
}
