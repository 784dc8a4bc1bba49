import Crypto
import Foundation
import IMGatewayAPI
import Testing

@Suite("docs/openapi.yaml and the generated code")
struct OpenAPIDocumentTests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../docs/openapi.yaml").standardized

    @Test("Sources/IMGatewayAPI/Generated was generated from the document as it is (else: make openapi)")
    func generatedFromThisDocument() throws {
        let digest = SHA256.hash(data: try Data(contentsOf: Self.document)).map { String(format: "%02x", $0) }.joined()
        #expect(digest == OpenAPIDocument.sha256, "docs/openapi.yaml changed since the code was generated: run make openapi")
    }
}
