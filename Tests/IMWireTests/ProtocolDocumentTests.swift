import Foundation
import IMWire
import Testing

/// `vectors.json` is generated from ``VectorCatalog`` and `docs/PROTOCOL.md` from `vectors.json`:
/// this suite fails when either drifts. Regenerate both with
/// `IMWIRE_REGENERATE=1 swift test --filter IMWireTests.ProtocolDocumentTests`.
@Suite("Protocol document and fixture")
struct ProtocolDocumentTests {
    static var regenerate: Bool { ProcessInfo.processInfo.environment["IMWIRE_REGENERATE"] == "1" }

    @Test("vectors.json is what the catalog produces, and PROTOCOL.md renders vectors.json")
    func documentAndFixtureAreInSync() throws {
        let generated = try ProtocolDocument.makeVectorFile()
        let json = try ProtocolDocument.encodeJSON(generated)
        if Self.regenerate {
            try json.write(to: ProtocolDocument.fixtureURL)
            var document = try String(contentsOf: ProtocolDocument.documentURL, encoding: .utf8)
            for (name, content) in ProtocolDocument.sections(for: generated) {
                document = try #require(ProtocolDocument.replacing(name, with: content, in: document), "markers for \(name)")
            }
            try document.write(to: ProtocolDocument.documentURL, atomically: true, encoding: .utf8)
        }

        let stored = try Data(contentsOf: ProtocolDocument.fixtureURL)
        let fixture = try JSONDecoder().decode(VectorFile.self, from: stored)
        #expect(fixture == generated, "vectors.json differs from VectorCatalog; regenerate and review the diff")
        #expect(stored == json, "vectors.json is not in canonical form")

        let document = try String(contentsOf: ProtocolDocument.documentURL, encoding: .utf8)
        for (name, content) in ProtocolDocument.sections(for: fixture) {
            let section = try #require(ProtocolDocument.section(name, in: document), "PROTOCOL.md lacks section \(name)")
            #expect(section == ProtocolDocument.wrapped(content), "PROTOCOL.md section \(name) differs from vectors.json")
        }
    }

    @Test("every known tag, operation, error code and feature is documented")
    func everythingIsNamed() {
        for tag in IMTag.allKnown {
            #expect(tag.name != nil && tag.meaning != nil)
        }
        for operation in IMOperation.allKnown {
            #expect(operation.name != nil && operation.frameType != nil)
        }
        for code in IMErrorCode.allKnown {
            #expect(code.name != nil && code.meaning != nil)
        }
        #expect(Set(IMTag.allKnown.compactMap(\.name)).count == IMTag.allKnown.count)
        #expect(Set(IMOperation.allKnown.compactMap(\.name)).count == IMOperation.allKnown.count)
        #expect(Set(IMErrorCode.allKnown.compactMap(\.name)).count == IMErrorCode.allKnown.count)
    }
}
