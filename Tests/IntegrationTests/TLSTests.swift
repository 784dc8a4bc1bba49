import Foundation
import Mosquitto
import Testing
import IMTestSupport

/// TLS to a mosquitto TLS listener, with a CA and certificates made by the test.
@Suite("Mosquitto client over TLS", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct TLSTests {
    /// A throwaway PKI: a CA, a server certificate for localhost/127.0.0.1, a client
    /// certificate, and an unrelated CA.
    struct PKI {
        let directory: URL
        var path: (String) -> String { { self.directory.appendingPathComponent($0).path } }

        static func make() async throws -> PKI {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-pki-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let openssl = "/usr/bin/openssl"
            let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
            for ca in ["ca", "other-ca"] {
                try await run(openssl, ["req", "-x509"] + key + ["-keyout", "\(ca).key", "-out", "\(ca).crt", "-days", "2", "-subj", "/CN=imgw test \(ca)"], in: directory)
            }
            try "subjectAltName=DNS:localhost,IP:127.0.0.1\n".write(to: directory.appendingPathComponent("server.ext"), atomically: true, encoding: .utf8)
            try "extendedKeyUsage=clientAuth\n".write(to: directory.appendingPathComponent("client.ext"), atomically: true, encoding: .utf8)
            for (name, subject) in [("server", "/CN=localhost"), ("client", "/CN=alice")] {
                try await run(openssl, ["req"] + key + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", subject], in: directory)
                try await run(openssl, ["x509", "-req", "-in", "\(name).csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                                  "-out", "\(name).crt", "-days", "2", "-extfile", "\(name).ext"], in: directory)
            }
            return PKI(directory: directory)
        }
    }

    private func tlsBroker(_ pki: PKI, requireClientCertificate: Bool = false) async throws -> TestBroker {
        var options = TestBroker.Options()
        options.listenerLines = [
            "cafile \(pki.path("ca.crt"))",
            "certfile \(pki.path("server.crt"))",
            "keyfile \(pki.path("server.key"))",
            "require_certificate \(requireClientCertificate)",
        ]
        return try await TestBroker.start(options)
    }

    @Test("publish and receive over TLS, verifying the broker against the test CA")
    func roundTrip() async throws {
        let pki = try await PKI.make()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let broker = try await tlsBroker(pki)
        let client = makeClient(broker) {
            $0.host = "localhost"
            $0.tls = .init(caFile: pki.path("ca.crt"))
        }
        let inbox = try await connected(client)
        try await client.subscribe("secure/#", qos: .atLeastOnce)
        for qos in QoS.allCases {
            try await client.publish(topic: "secure/\(qos.rawValue)", string: "over tls", qos: qos)
            let message = try await inbox.next(within: 10, "the TLS round trip at \(qos)")
            #expect(message.topic == "secure/\(qos.rawValue)")
            #expect(message.payloadString == "over tls")
        }
        await client.close()
    }

    @Test("a broker certificate from another CA is refused")
    func wrongCA() async throws {
        let pki = try await PKI.make()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let broker = try await tlsBroker(pki)
        let client = makeClient(broker) {
            $0.host = "localhost"
            $0.tls = .init(caFile: pki.path("other-ca.crt"))
        }
        let error = await #expect(throws: MosquittoError.self) { try await client.connect() }
        #expect(error != nil)
        #expect(await client.state == .disconnected)
        await client.close()
    }

    @Test("a plain client cannot talk to the TLS listener; a missing CA file is a clear argument error")
    func misconfigured() async throws {
        let pki = try await PKI.make()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let broker = try await tlsBroker(pki)
        let plain = makeClient(broker)
        await #expect(throws: MosquittoError.self) { try await plain.connect() }
        await plain.close()

        let missing = makeClient(broker) { $0.tls = .init(caFile: "/nonexistent/ca.crt") }
        let error = await #expect(throws: MosquittoError.self) { try await missing.connect() }
        guard case .invalidArgument(let what)? = error else {
            Issue.record("expected invalidArgument, got \(String(describing: error))")
            return
        }
        #expect(what.contains("/nonexistent/ca.crt"))
        await missing.close()
    }

    @Test("mutual TLS: the client certificate is presented")
    func clientCertificate() async throws {
        let pki = try await PKI.make()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let broker = try await tlsBroker(pki, requireClientCertificate: true)
        let without = makeClient(broker) {
            $0.host = "localhost"
            $0.tls = .init(caFile: pki.path("ca.crt"))
        }
        await #expect(throws: MosquittoError.self) { try await without.connect() }
        await without.close()

        let with = makeClient(broker) {
            $0.host = "localhost"
            $0.tls = .init(caFile: pki.path("ca.crt"), certFile: pki.path("client.crt"), keyFile: pki.path("client.key"))
        }
        let inbox = try await connected(with)
        try await with.subscribe("mtls", qos: .atLeastOnce)
        try await with.publish(topic: "mtls", string: "hello", qos: .atLeastOnce)
        #expect(try await inbox.next().payloadString == "hello")
        await with.close()
    }
}
