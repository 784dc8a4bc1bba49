import Foundation
import IMWire
import NIOCore

/// Generates the marked sections of `docs/PROTOCOL.md` and the fixture `vectors.json`.
enum ProtocolDocument {
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let documentURL = repository.appendingPathComponent("docs/PROTOCOL.md")
    static let fixtureURL = repository.appendingPathComponent("Tests/IMWireTests/Fixtures/vectors.json")

    /// The generated sections, by marker name.
    static func sections(for file: VectorFile) -> [(name: String, content: String)] {
        [
            ("tags", self.tagTable()),
            ("operations", self.operationTable()),
            ("features", self.featureTable()),
            ("errors", self.errorTable()),
            ("vectors", self.vectors(file)),
            ("malformed", self.malformedVectors(file)),
        ]
    }

    static func begin(_ name: String) -> String { "<!-- generated:\(name):begin (do not edit; see Tests/IMWireTests) -->" }
    static func end(_ name: String) -> String { "<!-- generated:\(name):end -->" }

    /// The text between a section's markers, or `nil` if the markers are missing.
    static func section(_ name: String, in document: String) -> String? {
        guard let start = document.range(of: self.begin(name)), let stop = document.range(of: self.end(name)),
            start.upperBound <= stop.lowerBound
        else { return nil }
        return String(document[start.upperBound..<stop.lowerBound])
    }

    /// `document` with a section's text replaced.
    static func replacing(_ name: String, with content: String, in document: String) -> String? {
        guard let start = document.range(of: self.begin(name)), let stop = document.range(of: self.end(name)) else {
            return nil
        }
        return document.replacingCharacters(in: start.upperBound..<stop.lowerBound, with: "\n" + content + "\n")
    }

    /// The expected text between markers (with the surrounding newlines).
    static func wrapped(_ content: String) -> String { "\n" + content + "\n" }

    // MARK: Fixture

    static func makeVectorFile() throws -> VectorFile {
        let encoder = IMFrameEncoder()
        var vectors: [FrameVector] = []
        for entry in VectorCatalog.entries {
            var wire = try encoder.encode(entry.frame)
            var decoder = IMFrameDecoder()
            guard let decoded = try decoder.decode(buffer: &wire), wire.readableBytes == 0 else {
                throw VectorError.badValue(entry.name)
            }
            guard try IMMessage(frame: decoded) == entry.message else { throw VectorError.badValue(entry.name) }
            vectors.append(
                try FrameVector(
                    name: entry.name, section: entry.section, title: entry.title, direction: entry.direction,
                    description: entry.description, canonical: entry.canonical,
                    wire: try encoder.encode(entry.frame), decoded: decoded
                )
            )
        }
        var malformed: [MalformedVector] = []
        for entry in VectorCatalog.malformed {
            let error = try self.refusal(of: entry.wire, stage: entry.stage)
            guard error.errorCode == entry.expected else { throw VectorError.badValue("\(entry.name): \(error)") }
            malformed.append(
                MalformedVector(
                    name: entry.name, title: entry.title, description: entry.description, hex: hexString(entry.wire),
                    stage: entry.stage, errorCode: error.errorCode.rawValue, errorName: error.errorCode.name ?? "?",
                    closesConnection: error.isFatal, detail: error.description
                )
            )
        }
        return VectorFile(
            format: "imwire-test-vectors/1",
            note: "Generated from Tests/IMWireTests/Support/VectorCatalog.swift by IMWIRE_REGENERATE=1 swift test --filter IMWireTests.ProtocolDocumentTests; rendered into docs/PROTOCOL.md.",
            vectors: vectors,
            malformed: malformed
        )
    }

    /// The error a receiver reports for `wire`: from the decoder (`frame`) or from decoding the message (`message`).
    static func refusal(of wire: ByteBuffer, stage: String) throws -> IMWireError {
        var input = wire
        var decoder = IMFrameDecoder()
        do {
            guard let frame = try decoder.decode(buffer: &input) else {
                throw VectorError.badValue("incomplete frame")
            }
            guard stage == "message" else { throw VectorError.badValue("frame accepted") }
            _ = try IMMessage(frame: frame)
            throw VectorError.badValue("message accepted")
        } catch let error as IMWireError {
            guard error.isFatal == (stage == "frame") else { throw VectorError.badValue("wrong stage: \(error)") }
            return error
        }
    }

    static func encodeJSON(_ file: VectorFile) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(file)
        data.append(0x0A)
        return data
    }

    // MARK: Tables

    static func tagTable() -> String {
        var lines = ["| Tag | Name | Value | Meaning |", "|---|---|---|---|"]
        for tag in IMTag.allKnown {
            if tag == .container {
                lines.append("| `0xF000`–`0xFFFE` | APP | bytes | Application-defined; passed through unchanged in CHAT and DELIVERY. |")
            }
            lines.append("| `0x\(hexString(tag.rawValue, width: 4))` | \(tag.name!) | \(tag.valueType.rawValue) | \(tag.meaning!) |")
        }
        return lines.joined(separator: "\n")
    }

    static let impliedBy: [IMOperation: String] = [
        .hello: "OP, or implied by VERSION_REQUEST", .helloOK: "OP, or implied by VERSION_RESPONSE",
        .login: "OP, or implied by AUTH_TOKEN", .loginOK: "OP, or implied by USER_ID",
        .error: "OP, or implied by ERROR_CODE",
        .chat: "implied: DATA with TO, or with GROUP and no FROM (no OP item)",
        .delivery: "implied: DATA with FROM and no TO (a carbon with TO carries OP)",
        .receipt: "implied: READ_RECEIPT with TO (no OP item)",
        .receiptNotice: "implied: READ_RECEIPT with FROM and no TO (no OP item)",
    ]

    static func operationTable() -> String {
        var lines = ["| Op | Name | Frame type | Named by |", "|---|---|---|---|"]
        for op in IMOperation.allKnown {
            lines.append("| `0x\(hexString(op.rawValue, width: 4))` | \(op.name!) | \(op.frameType!) | \(self.impliedBy[op] ?? "OP") |")
        }
        return lines.joined(separator: "\n")
    }

    static func featureTable() -> String {
        var lines = ["| Bit | Mask | Name | Meaning |", "|---|---|---|---|"]
        for (bit, entry) in IMFeatures.allKnown.enumerated() {
            lines.append("| \(bit) | `0x\(hexString(entry.feature.rawValue, width: 4))` | \(entry.name) | \(entry.meaning) |")
        }
        return lines.joined(separator: "\n")
    }

    static func errorTable() -> String {
        var lines = ["| Code | Name | Gateway closes | Meaning |", "|---|---|---|---|"]
        for code in IMErrorCode.allKnown {
            lines.append("| \(code.rawValue) | \(code.name!) | \(code.closesConnection ? "yes" : "no") | \(code.meaning!) |")
        }
        return lines.joined(separator: "\n")
    }
}
