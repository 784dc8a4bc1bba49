import Foundation
import IMWire
import NIOCore
import Testing

/// Checks every vector of `Fixtures/vectors.json` (rendered in docs/PROTOCOL.md) against the codec.
@Suite("Test vectors")
struct TestVectorTests {
    static let file: VectorFile? = try? JSONDecoder().decode(
        VectorFile.self,
        from: Data(contentsOf: ProtocolDocument.fixtureURL)
    )
    static let vectorNames: [String] = file?.vectors.map(\.name) ?? []
    static let malformedNames: [String] = file?.malformed.map(\.name) ?? []
    static let catalog = Dictionary(uniqueKeysWithValues: VectorCatalog.entries.map { ($0.name, $0) })

    static func vector(_ name: String) throws -> FrameVector {
        try #require(file?.vectors.first { $0.name == name })
    }

    static func decodeOne(_ hex: String) throws -> IMFrame {
        var input = try buffer(fromHex: hex)
        var decoder = IMFrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &input))
        #expect(input.readableBytes == 0)
        return frame
    }

    @Test("the fixture covers every operation and every error code the decoder produces")
    func coverage() throws {
        let file = try #require(Self.file)
        let operations = Set(file.vectors.compactMap { v in v.items?.first { $0.name == "OP" } }.compactMap { item -> UInt16? in
            if case .unsigned(let v) = item.value { return UInt16(v) } else { return nil }
        })
        let implied = Set(VectorCatalog.entries.compactMap { $0.message.operation?.rawValue })
        #expect(operations.union(implied) == Set(IMOperation.allKnown.map(\.rawValue)))
        let framing = Set(file.malformed.filter { $0.stage == "frame" }.map(\.errorCode))
        #expect(framing == Set(IMErrorCode.allKnown.filter { $0.rawValue < 200 }.map(\.rawValue)))
    }

    @Test("decoding the hex gives the documented header and items", arguments: vectorNames)
    func decodesToDocumentedFields(name: String) throws {
        let vector = try Self.vector(name)
        let frame = try Self.decodeOne(vector.hex)
        #expect(VectorHeader(frame.header) == vector.header)
        if let raw = vector.rawBody {
            #expect(hexString(frame.body) == raw)
        } else {
            #expect(try VectorItem.items(frame.body) == vector.items)
        }
    }

    @Test("encoding the documented fields gives the hex", arguments: vectorNames)
    func encodesFromDocumentedFields(name: String) throws {
        let vector = try Self.vector(name)
        let frame = try vector.frame()
        let wire = try IMFrameEncoder().encode(frame)
        if vector.header.compress == 0 {
            #expect(hexString(wire) == vector.hex)
        } else {
            // zlib output may differ between implementations; its inflation may not.
            let again = try Self.decodeOne(hexString(wire))
            #expect(again.body == (try vector.plainBody()))
            #expect(again.header.compressType == .zlib)
        }
    }

    @Test("the typed message API reads and writes the vector", arguments: vectorNames)
    func typedRoundTrip(name: String) throws {
        let vector = try Self.vector(name)
        let entry = try #require(Self.catalog[name])
        let frame = try Self.decodeOne(vector.hex)
        let message = try IMMessage(frame: frame)
        #expect(message == entry.message)
        let rebuilt = message.frame(
            sequence: frame.header.sequence,
            timestamp: frame.header.timestamp,
            sessionID: frame.header.sessionID,
            compressType: frame.header.compressType
        )
        if vector.canonical {
            #expect(hexString(try IMFrameEncoder().encode(rebuilt)) == vector.hex)
        } else {
            #expect(try IMMessage(frame: Self.decodeOne(hexString(try IMFrameEncoder().encode(rebuilt)))) == VectorCatalog.canonical(message))
        }
    }

    @Test("malformed vectors are refused with the documented code", arguments: malformedNames)
    func malformedIsRefused(name: String) throws {
        let vector = try #require(Self.file?.malformed.first { $0.name == name })
        let error = try ProtocolDocument.refusal(of: try buffer(fromHex: vector.hex), stage: vector.stage)
        #expect(error.errorCode.rawValue == vector.errorCode)
        #expect(error.errorCode.name == vector.errorName)
        #expect(error.isFatal == vector.closesConnection)
        #expect(error.description == vector.detail)
    }
}
